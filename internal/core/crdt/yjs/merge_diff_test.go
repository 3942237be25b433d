package yjs

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// diffHistories is how many random edit histories the differential test
// checks; -short and the race pass (merging has no concurrency to race)
// check fewer, and scripts/test.sh runs the full count without the race
// detector.
const (
	diffHistories      = 10000
	diffHistoriesShort = 1000
	diffSeed           = 20261201
)

// history is one line of yjsdiff.cjs's output: the per-client updates of a
// random edit history and Yjs's own merge of them (apply all, then
// encodeStateAsUpdate).
type history struct {
	Updates []string `json:"u"`
	Merged  string   `json:"m"`
}

func (h history) decoded(t testing.TB) [][]byte {
	t.Helper()
	out := make([][]byte, len(h.Updates))
	for i, s := range h.Updates {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

// runNode runs testdata/yjsdiff.cjs with the reference yjs package.
func runNode(t testing.TB, args ...string) []byte {
	t.Helper()
	dir := testenv.Yjs(t)
	script, err := filepath.Abs(filepath.Join("testdata", "yjsdiff.cjs"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "YJS_DIR="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node yjsdiff.cjs %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// generate has node write n random histories and reads them back.
func generate(t testing.TB, n int, seed int) (string, []history) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "histories.jsonl")
	start := time.Now()
	runNode(t, "gen", strconv.Itoa(n), strconv.Itoa(seed), file)
	t.Logf("node generated %d histories in %v", n, time.Since(start).Round(time.Millisecond))
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var hs []history
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var h history
		if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(hs) != n {
		t.Fatalf("node wrote %d histories, want %d", len(hs), n)
	}
	return file, hs
}

// mergeTree merges updates pairwise, bottom up: a different association
// than one flat merge.
func mergeTree(updates [][]byte) ([]byte, error) {
	if len(updates) <= 1 {
		return Merge(updates...)
	}
	mid := len(updates) / 2
	l, err := mergeTree(updates[:mid])
	if err != nil {
		return nil, err
	}
	r, err := mergeTree(updates[mid:])
	if err != nil {
		return nil, err
	}
	return Merge(r, l)
}

// mergeFold merges the updates one at a time into a running result, the
// way the engine merges each push into the stored column (§5.10.3).
func mergeFold(updates [][]byte) ([]byte, error) {
	acc, err := Merge()
	for _, u := range updates {
		if err != nil {
			return nil, err
		}
		acc, err = Merge(acc, u)
	}
	return acc, err
}

// TestYjsMergerMatchesYjs is the differential test of issue 22: node and
// the reference yjs package generate random edit histories across several
// simulated clients (text with formatting, embeds and surrogate pairs, map
// set and delete, array insert and delete, nested types, XML, subdocuments,
// deletes, concurrent inserts at one position, plus full states, diffs and
// Yjs merges of some updates). Go merges each history's updates in several
// orders and associations; every order must give the same bytes (§5.10.2:
// commutative, associative; merging the result with itself changes
// nothing), and Yjs, applying the Go merge to a fresh document, must reach
// the same document and state vector as Yjs's own merge.
func TestYjsMergerMatchesYjs(t *testing.T) {
	n := diffHistories
	if testing.Short() || raceEnabled {
		n = diffHistoriesShort
	}
	genFile, hs := generate(t, n, diffSeed)

	rng := rand.New(rand.NewPCG(diffSeed, 1))
	var got strings.Builder
	updates, start := 0, time.Now()
	for i, h := range hs {
		us := h.decoded(t)
		updates += len(us)
		want, err := Merge(us...)
		if err != nil {
			t.Fatalf("history %d: Merge: %v", i, err)
		}
		reversed := make([][]byte, len(us))
		for j, u := range us {
			reversed[len(us)-1-j] = u
		}
		shuffled := append([][]byte(nil), us...)
		rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		orders := map[string]func() ([]byte, error){
			"reversed":      func() ([]byte, error) { return Merge(reversed...) },
			"shuffled":      func() ([]byte, error) { return Merge(shuffled...) },
			"tree":          func() ([]byte, error) { return mergeTree(shuffled) },
			"one at a time": func() ([]byte, error) { return mergeFold(shuffled) },
			"with itself":   func() ([]byte, error) { return Merge(want, want) },
		}
		for name, merge := range orders {
			b, err := merge()
			if err != nil {
				t.Fatalf("history %d, %s: Merge: %v", i, name, err)
			}
			if !bytes.Equal(b, want) {
				t.Fatalf("history %d: merging %s gives other bytes than in order\n in order: %x\n %s: %x", i, name, want, name, b)
			}
		}
		got.WriteString(hex.EncodeToString(want))
		got.WriteByte('\n')
	}
	t.Logf("Go merged %d histories (%d updates) six ways in %v", len(hs), updates, time.Since(start).Round(time.Millisecond))

	gotFile := filepath.Join(t.TempDir(), "go-merged.txt")
	if err := os.WriteFile(gotFile, []byte(got.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Checked  int `json:"checked"`
		Failures []struct {
			Line int    `json:"line"`
			Why  string `json:"why"`
			Want string `json:"want"`
			Got  string `json:"got"`
		} `json:"failures"`
	}
	if err := json.Unmarshal(runNode(t, "check", genFile, gotFile), &res); err != nil {
		t.Fatal(err)
	}
	if res.Checked != n {
		t.Fatalf("node checked %d histories, want %d", res.Checked, n)
	}
	for _, f := range res.Failures {
		h := hs[f.Line]
		t.Errorf("history %d: %s\n want %s\n got  %s\n updates %v\n yjs merge %s", f.Line, f.Why, f.Want, f.Got, h.Updates, h.Merged)
	}
}

// BenchmarkMergeVsYjs merges the same random histories in Go and with
// Y.mergeUpdates under node, and reports both as nanoseconds per input
// update (go-ns/update, js-ns/update); then the engine's case, a stored
// document (Yjs's merge of a history) merged with one pushed update (the
// history's last), as nanoseconds per push (go-ns/push, js-ns/push).
func BenchmarkMergeVsYjs(b *testing.B) {
	file, hs := generate(b, 1000, diffSeed+1)
	inputs := make([][][]byte, len(hs))
	var pushes [][2][]byte
	updates := 0
	for i, h := range hs {
		inputs[i] = h.decoded(b)
		updates += len(inputs[i])
		if n := len(inputs[i]); n > 0 {
			m, err := hex.DecodeString(h.Merged)
			if err != nil {
				b.Fatal(err)
			}
			pushes = append(pushes, [2][]byte{m, inputs[i][n-1]})
		}
	}
	var js struct {
		NsPerUpdate float64 `json:"nsPerUpdate"`
		NsPerPush   float64 `json:"nsPerPush"`
	}
	if err := json.Unmarshal(runNode(b, "bench", file, "3"), &js); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var pushTime time.Duration
	for range b.N {
		for _, us := range inputs {
			if _, err := Merge(us...); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		for _, p := range pushes {
			if _, err := Merge(p[0], p[1]); err != nil {
				b.Fatal(err)
			}
		}
		pushTime += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64((b.Elapsed()-pushTime).Nanoseconds())/float64(b.N*updates), "go-ns/update")
	b.ReportMetric(js.NsPerUpdate, "js-ns/update")
	b.ReportMetric(float64(pushTime.Nanoseconds())/float64(b.N*len(pushes)), "go-ns/push")
	b.ReportMetric(js.NsPerPush, "js-ns/push")
	b.Logf("%d histories, %d updates, %d pushes", len(hs), updates, len(pushes))
}
