//go:build !unix

package main

// processAlive cannot check elsewhere; trust the file.
func processAlive(int) bool { return true }
