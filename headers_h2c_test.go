package flashserve

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestHeaderRulesOverH2C: the header-rule leak of #13 item 1, over
// HTTP/2 (h2c): a deferred replace that grows Vary on one site, three
// requests each to it and to a site without rules, for a memory hit, a
// sendfile body, a multipart range and a 304; every answer's Vary is the
// first answer's.
func TestHeaderRulesOverH2C(t *testing.T) {
	root, _ := headerFixture(t)
	p1, p2 := freePort(t), freePort(t)
	loadCaddyfile(t, caddyGlobals{protocols: "h1 h2c"}.text(t)+
		siteBlock(p1, root, `header >Vary "Accept-Encoding" "Accept-Encoding, Origin"`, `header >Accept-Ranges "bytes" "bytes, none"`, "flash_serve")+
		siteBlock(p2, root, "flash_serve"))
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Protocols: &protos}}
	defer c.CloseIdleConnections()
	get := func(port int, path string, hdr ...string) *http.Response {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d%s", port, path), nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s: %s, want HTTP/2", path, resp.Proto)
		}
		return resp
	}
	etag := get(p2, "/small.txt").Header.Get("Etag")
	cases := []struct {
		path string
		hdr  []string
	}{
		{"/small.txt", nil},
		{"/big.bin", nil},
		{"/big.bin", []string{"Range", "bytes=0-9,100-199"}},
		{"/small.txt", []string{"If-None-Match", etag}},
	}
	first := map[string]string{}
	for round := range 3 {
		for _, port := range []int{p1, p2} {
			for _, tc := range cases {
				resp := get(port, tc.path, tc.hdr...)
				got := fmt.Sprint(resp.StatusCode, resp.Header.Values("Vary"), resp.Header.Values("Accept-Ranges"))
				key := fmt.Sprint(port, tc)
				if round == 0 {
					first[key] = got
					t.Logf("%d %s %v: %s", port, tc.path, tc.hdr, got)
				} else if got != first[key] {
					t.Errorf("round %d, %d %s %v: %s, first was %s", round, port, tc.path, tc.hdr, got, first[key])
				}
			}
		}
	}
}

// TestPlanValuesPastTheArray: a response that needs more header values
// than the plan's array (a multipart range of a precompressed file sets
// nine) gets a slice of its own for each, past the array as within it.
func TestPlanValuesPastTheArray(t *testing.T) {
	p := new(plan)
	var vs [][]string
	for i := range len(p.values) + 4 {
		v := p.value(fmt.Sprint("v", i))
		if len(v) != 1 || cap(v) != 1 {
			t.Fatalf("value %d: len %d cap %d, want 1 and 1", i, len(v), cap(v))
		}
		vs = append(vs, v)
	}
	for i, v := range vs {
		v[0] = fmt.Sprint("w", i)
		_ = append(v, "appended")
	}
	for i, v := range vs {
		if v[0] != fmt.Sprint("w", i) {
			t.Errorf("value %d is %q after every value was written once, want %q", i, v[0], fmt.Sprint("w", i))
		}
	}
	t.Logf("404 trace: %q", notFoundTrace)
}
