// Package demotools holds the tools the `windlass dev` and `windlass worker`
// commands serve out of the box, also used by tests: echo, add, sleep (a
// long-running tool that honours its context), transfer_funds (gated:
// it requires a human's approval) and refund (gated when its amount is over
// 100: an approval condition).
package demotools

import (
	"context"
	"fmt"
	"time"

	"github.com/windlass-dev/windlass"
)

// EchoArgs are the arguments of echo.
type EchoArgs struct {
	// Text is echoed back.
	Text string `json:"text" jsonschema:"description=Text to echo back"`
}

// AddArgs are the arguments of add.
type AddArgs struct {
	// A is the first addend.
	A float64 `json:"a" jsonschema:"description=First addend"`
	// B is the second addend.
	B float64 `json:"b" jsonschema:"description=Second addend"`
}

// SleepArgs are the arguments of sleep.
type SleepArgs struct {
	// Seconds is how long to sleep.
	Seconds float64 `json:"seconds" jsonschema:"description=How long to sleep,minimum=0,maximum=3600"`
}

// TransferArgs are the arguments of transfer_funds.
type TransferArgs struct {
	// To is the recipient account.
	To string `json:"to" jsonschema:"description=Recipient account"`
	// Amount is how much to send.
	Amount float64 `json:"amount" jsonschema:"description=Amount to send,exclusiveMinimum=0"`
	// Currency is EUR (default) or USD.
	Currency string `json:"currency,omitempty" jsonschema:"enum=EUR,enum=USD,default=EUR"`
}

// RefundArgs are the arguments of refund.
type RefundArgs struct {
	// Order is the order to refund.
	Order string `json:"order" jsonschema:"description=Order to refund"`
	// Amount is how much to give back.
	Amount float64 `json:"amount" jsonschema:"description=Amount to refund,exclusiveMinimum=0"`
}

// RefundCondition is refund's approval condition: a refund over 100 waits
// for a person.
const RefundCondition = `args.amount > 100.0`

// Refund pretends to refund an order; a refund over 100 needs approval.
func Refund() windlass.Tool {
	return windlass.MustFunc("refund", func(ctx context.Context, in RefundArgs) (string, error) {
		return fmt.Sprintf("refunded %.2f on order %s", in.Amount, in.Order), nil
	}, windlass.WithDescription("Refund an order. A refund over 100 waits for a human's approval."), windlass.WithApprovalCondition(RefundCondition))
}

// Echo returns its text.
func Echo() windlass.Tool {
	return windlass.MustFunc("echo", func(ctx context.Context, in EchoArgs) (string, error) {
		return in.Text, nil
	}, windlass.WithDescription("Echo the given text back."))
}

// Add returns a+b.
func Add() windlass.Tool {
	return windlass.MustFunc("add", func(ctx context.Context, in AddArgs) (float64, error) {
		return in.A + in.B, nil
	}, windlass.WithDescription("Add two numbers."))
}

// Sleep sleeps for the given seconds, or until its context ends, and
// reports its progress about ten times along the way (at most once a
// second), so that progress shows in `windlass dev`, `status` and MCP.
func Sleep() windlass.Tool {
	return windlass.MustFunc("sleep", func(ctx context.Context, in SleepArgs) (string, error) {
		d := time.Duration(in.Seconds * float64(time.Second))
		start := time.Now()
		t := time.NewTimer(d)
		defer t.Stop()
		tick := time.NewTicker(min(max(d/10, 50*time.Millisecond), time.Second))
		defer tick.Stop()
		for {
			select {
			case <-t.C:
				return fmt.Sprintf("slept %s", d), nil
			case <-tick.C:
				slept := time.Since(start)
				windlass.ReportProgress(ctx, float64(slept)/float64(d), fmt.Sprintf("slept %s of %s", slept.Round(time.Second/10), d))
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
	}, windlass.WithDescription("Sleep for a number of seconds (a long-running tool); reports its progress."), windlass.WithTimeout(time.Hour))
}

// TransferFunds pretends to send money; every call needs approval.
func TransferFunds() windlass.Tool {
	return windlass.MustFunc("transfer_funds", func(ctx context.Context, in TransferArgs) (string, error) {
		info, _ := windlass.CallInfoFromContext(ctx)
		cur := in.Currency
		if cur == "" {
			cur = "EUR"
		}
		return fmt.Sprintf("sent %.2f %s to %s (transfer %s)", in.Amount, cur, in.To, info.ID), nil
	}, windlass.WithDescription("Send money to an account. Requires a human's approval."), windlass.WithApproval())
}

// All returns every demo tool.
func All() []windlass.Tool {
	return []windlass.Tool{Echo(), Add(), Sleep(), TransferFunds(), Refund()}
}
