package flashserve

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

var updateGolden = flag.Bool("update", false, "rewrite the expected side of the golden adapt tests")

const goldenSeparator = "\n----------\n"

// TestCaddyfileAdapt runs the golden adapt tests in testdata/caddyfile_adapt:
// each file is a Caddyfile, a line of dashes, then the JSON it adapts to or
// "error: " and the whole error it must fail with, on one line.
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob("testdata/caddyfile_adapt/*.caddyfiletest")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden tests found: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			input, want, ok := strings.Cut(string(raw), goldenSeparator)
			if !ok {
				t.Fatalf("no %q separator", strings.TrimSpace(goldenSeparator))
			}
			// Every refusal is the parser's, range checks included, so
			// an error golden fails to adapt.
			got := adaptForTest(input)
			if *updateGolden {
				if err := os.WriteFile(file, []byte(input+goldenSeparator+got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if strings.HasPrefix(want, "error: ") {
				if got != want {
					t.Fatalf("want the error\n%s got\n%s", want, got)
				}
				return
			}
			if strings.TrimSpace(got) != strings.TrimSpace(want) {
				t.Fatalf("adapted JSON differs.\n--- got:\n%s\n--- want:\n%s", got, want)
			}
		})
	}
}

// validateForTest provisions and validates an adapted config as caddy.Load
// would, without starting it, and returns "error: ..." or "valid".
func validateForTest(cfgJSON string) string {
	var cfg caddy.Config
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		return "error: unmarshalling the adapted config: " + err.Error() + "\n"
	}
	if err := caddy.Validate(&cfg); err != nil {
		return "error: validate: " + err.Error() + "\n"
	}
	return "valid\n"
}

// adaptForTest returns the indented JSON of a Caddyfile, or "error: ...".
func adaptForTest(input string) string {
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(input), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	var out bytes.Buffer
	if err := json.Indent(&out, cfg, "", "\t"); err != nil {
		return "error: indenting: " + err.Error() + "\n"
	}
	return out.String() + "\n"
}

// syntaxBlock returns the syntax block of UnmarshalCaddyfile's doc
// comment, one line each, starting with the `flash_serve` line.
func syntaxBlock(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("caddyfile.go")
	if err != nil {
		t.Fatal(err)
	}
	var doc []string
	in := false
	for _, line := range strings.Split(string(src), "\n") {
		body, ok := strings.CutPrefix(line, "//\t")
		switch {
		case ok && strings.HasPrefix(body, "flash_serve [<matcher>]"):
			in = true
			doc = append(doc, body)
		case in && ok:
			doc = append(doc, body)
			if body == "}" {
				in = false
			}
		}
	}
	if len(doc) < 3 {
		t.Fatal("no syntax block in UnmarshalCaddyfile's doc comment")
	}
	return doc
}

// TestReadmeSyntaxMatchesDocComment keeps the README's Caddyfile syntax
// block the same text as UnmarshalCaddyfile's doc comment.
func TestReadmeSyntaxMatchesDocComment(t *testing.T) {
	doc := syntaxBlock(t)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```\n"+strings.Join(doc, "\n")+"\n```") {
		t.Fatalf("README.md lacks the syntax block of the doc comment:\n%s", strings.Join(doc, "\n"))
	}
}
