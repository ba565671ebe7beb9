package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
)

func runTools(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tools", "tools [flags]", stderr)
	c := commonFlags(fs)
	styleName := stringFlag(fs, "style", "openai", "schema style: openai, anthropic or gemini")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return &exitError{code: 2, err: fmt.Errorf("%s takes no arguments, got %q", fs.Name(), pos)}
	}
	style, err := windlass.ParseStyle(*styleName)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	log, err := c.logger(stderr)
	if err != nil {
		return err
	}
	nc, rc, err := c.connect("tools")
	if err != nil {
		return err
	}
	defer nc.Close()
	defer rc.Close()
	reg, err := c.registry(rc, log)
	if err != nil {
		return err
	}
	d, err := dispatcher.New(ctx, dispatcher.Config{Conn: nc, Registry: reg, Logger: log})
	if err != nil {
		return err
	}
	defer d.Close()
	tools, err := d.Tools(ctx, style)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(tools)
}
