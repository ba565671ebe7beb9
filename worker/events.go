package worker

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/textcut"
)

// publishEvent sends one of a call's events as a plain publish, which the
// events stream captures. It never waits: an event is advice for watchers
// and status queries, and a lost one is replaced by the next. An error's
// text is cut to maxEventText (a progress message is bounded where it is
// reported: windlass.MaxProgressMessage).
func (w *Worker) publishEvent(call windlass.ToolCall, e windlass.Event) {
	e.CallID, e.Tool, e.Worker, e.Key = call.ID, call.Name, w.cfg.ID, call.Key
	if e.Error != nil && len(e.Error.Message) > maxEventText {
		ce := *e.Error
		ce.Message = textcut.Cut(ce.Message, maxEventText)
		e.Error = &ce
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	data, err := json.Marshal(e)
	if err != nil {
		return
	}
	m := &nats.Msg{Subject: layout.EventSubject(call.ID, string(e.Kind)), Data: data, Header: nats.Header{layout.HeaderProtocol: []string{protocolVersion}}}
	_ = w.cfg.JetStream.Conn().PublishMsg(m)
}
