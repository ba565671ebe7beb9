package telemetry_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLogsCarryTheirContext reads the non-test sources of the packages
// that must log with the ...Context methods wherever a context is at hand,
// so that LogHandler can put the trace's ids on their lines: a
// logger.Info/Warn/Error/Debug("message", ...) call inside a function that
// has a ctx (a parameter, or a variable declared before the call) or an
// *http.Request in scope is an error.
func TestLogsCarryTheirContext(t *testing.T) {
	for _, dir := range []string{"../../dispatcher", "../../approval"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			for _, c := range contextlessLogs(t, path) {
				t.Errorf("%s: %s has a context at hand; use %sContext", c.pos, c.call, c.method)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestContextlessLogsFound checks the reader of TestLogsCarryTheirContext
// on a sample: it must find exactly the calls marked "want".
func TestContextlessLogsFound(t *testing.T) {
	src := `package p

func a(ctx context.Context, log *slog.Logger) {
	log.Info("want")
	log.InfoContext(ctx, "ok")
	go func() { log.Warn("want") }()
	_ = err.Error()
}

func b(log *slog.Logger) {
	log.Debug("ok: no context")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log.Error("want")
}

func c(w http.ResponseWriter, r *http.Request) {
	h.cfg.Logger.Warn("want")
	http.Error(w, "ok", 500)
}

func d() {
	f := func(ctx context.Context) {}
	log.Info("ok: the ctx is another function's")
}
`
	path := filepath.Join(t.TempDir(), "p.go")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	found := contextlessLogs(t, path)
	if len(found) != 4 {
		t.Errorf("found %d calls, want 4: %+v", len(found), found)
	}
	for _, c := range found {
		if !strings.Contains(c.call, `"want"`) {
			t.Errorf("%s: %s found, but it is fine", c.pos, c.call)
		}
	}
}

// contextless is a logging call without its context.
type contextless struct {
	pos          token.Position
	call, method string
}

// contextlessLogs parses one file and returns its logging calls made
// without the context their function has at hand.
func contextlessLogs(t *testing.T, path string) []contextless {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var found []contextless
	// scopes holds, for each function being walked (outermost first),
	// where its ctx or request became available; token.NoPos: none.
	var scopes []token.Pos
	var walk func(n ast.Node) bool
	walk = func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			if n.Body != nil {
				scopes = append(scopes, contextParam(n.Type))
				ast.Inspect(n.Body, walk)
				scopes = scopes[:len(scopes)-1]
			}
			return false
		case *ast.FuncLit:
			scopes = append(scopes, contextParam(n.Type))
			ast.Inspect(n.Body, walk)
			scopes = scopes[:len(scopes)-1]
			return false
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE && len(scopes) > 0 && scopes[len(scopes)-1] == token.NoPos {
				for _, l := range n.Lhs {
					if id, ok := l.(*ast.Ident); ok && id.Name == "ctx" {
						scopes[len(scopes)-1] = n.End()
					}
				}
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || len(n.Args) == 0 {
				return true
			}
			switch sel.Sel.Name {
			case "Info", "Warn", "Error", "Debug":
			default:
				return true
			}
			if lit, ok := n.Args[0].(*ast.BasicLit); !ok || lit.Kind != token.STRING {
				return true
			}
			for _, from := range scopes {
				if from != token.NoPos && from <= n.Pos() {
					msg, _ := strconv.Unquote(n.Args[0].(*ast.BasicLit).Value)
					found = append(found, contextless{pos: fset.Position(n.Pos()), call: sel.Sel.Name + "(" + strconv.Quote(msg) + ")", method: sel.Sel.Name})
					break
				}
			}
		}
		return true
	}
	ast.Inspect(file, walk)
	return found
}

// contextParam returns the position of a function's ctx parameter or
// *http.Request parameter, or token.NoPos.
func contextParam(ft *ast.FuncType) token.Pos {
	for _, f := range ft.Params.List {
		star, isPtr := f.Type.(*ast.StarExpr)
		isRequest := isPtr && isSelector(star.X, "http", "Request")
		for _, name := range f.Names {
			if name.Name == "ctx" || isRequest {
				return name.Pos()
			}
		}
	}
	return token.NoPos
}

// isSelector reports whether e is pkg.name.
func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}
