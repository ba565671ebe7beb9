package main

import (
	"net"
	"testing"
)

// TestDevAPIListenFallsBack: dev serves its HTTP API where the README's
// walk-through expects it; when that address is taken, it takes a free
// port of the same host instead — unless the address was asked for, which
// is then an error.
func TestDevAPIListenFallsBack(t *testing.T) {
	if devAPIListen != "127.0.0.1:8080" {
		t.Errorf("dev's API address %q; the README's walk-through uses 127.0.0.1:8080", devAPIListen)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()

	ln, err := listenAPI(addr, true)
	if err != nil {
		t.Fatalf("default address taken: %v; want a free port instead", err)
	}
	defer ln.Close()
	if got := ln.Addr().String(); got == addr {
		t.Errorf("listened on %s, the taken address", got)
	} else if host, _, _ := net.SplitHostPort(got); host != "127.0.0.1" {
		t.Errorf("fell back to %s; want the same host", got)
	}
	if ln, err := listenAPI(addr, false); err == nil {
		ln.Close()
		t.Errorf("an address asked for and taken: listened on %s; want an error", ln.Addr())
	}
}
