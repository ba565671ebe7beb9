package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/windlass-dev/windlass"
)

func runTools(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tools", "tools [flags]", stderr)
	c := commonFlags(fs)
	styleName := stringFlag(fs, "style", string(windlass.DefaultStyle), "schema style: "+windlass.StyleChoices())
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
	sess, err := c.open("tools", stderr)
	if err != nil {
		return err
	}
	defer sess.Close()
	d, err := sess.dispatcher(ctx)
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
