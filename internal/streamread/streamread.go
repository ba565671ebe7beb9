// Package streamread reads one message of a fleet stream the way every
// component must: each request bounded in time, and a "none" from a
// replica confirmed by the stream's leader before anyone acts on it.
//
// Direct gets (the fast path) may be answered by any replica, including
// one still catching up after a leader change; "the call has no result"
// from such a replica is not a fact. A worker about to run a gated call
// again, or a dispatcher about to tell a caller that a call is unknown,
// asks the leader.
package streamread

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/internal/retry"
)

// First returns the data of the first message on subject in stream s, or
// an error wrapping jetstream.ErrMsgNotFound when the stream's leader says
// there is none. nc is the connection s was opened on.
func First(ctx context.Context, nc *nats.Conn, s jetstream.Stream, subject string) ([]byte, error) {
	m, err := FirstMsg(ctx, nc, s, subject)
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}

// FirstMsg is [First] returning the whole message: its headers, stored
// time and sequence too.
func FirstMsg(ctx context.Context, nc *nats.Conn, s jetstream.Stream, subject string) (*jetstream.RawStreamMsg, error) {
	return NextMsg(ctx, nc, s, subject, 1)
}

// NextMsg returns the first message on subject in stream s at or after
// sequence from, or an error wrapping jetstream.ErrMsgNotFound when the
// stream's leader says there is none.
func NextMsg(ctx context.Context, nc *nats.Conn, s jetstream.Stream, subject string, from uint64) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, retry.ReadTimeout)
	defer cancel()
	m, err := s.GetMsg(ctx, from, jetstream.WithGetMsgSubject(subject))
	if err == nil {
		return m, nil
	}
	if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, err
	}
	return leaderNext(ctx, nc, s.CachedInfo().Config.Name, subject, from)
}

// leaderNext reads the first message on subject at or after sequence from
// through the stream leader's message API, never a replica's direct get.
func leaderNext(ctx context.Context, nc *nats.Conn, stream, subject string, from uint64) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj"`
	}{from, subject})
	if err != nil {
		return nil, err
	}
	m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Headers []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
		Error *struct {
			Code    int    `json:"code"`
			ErrCode int    `json:"err_code"`
			Message string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("stream %s: message get reply: %w", stream, err)
	}
	switch {
	case resp.Error != nil && resp.Error.Code == 404:
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, fmt.Errorf("stream %s: message get: %s (%d)", stream, resp.Error.Message, resp.Error.ErrCode)
	case resp.Message == nil:
		return nil, fmt.Errorf("stream %s: message get: empty reply", stream)
	}
	var hdr nats.Header
	if len(resp.Message.Headers) > 0 {
		if hdr, err = nats.DecodeHeadersMsg(resp.Message.Headers); err != nil {
			return nil, fmt.Errorf("stream %s: message get: headers: %w", stream, err)
		}
	}
	return &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Seq, Header: hdr, Data: resp.Message.Data, Time: resp.Message.Time}, nil
}
