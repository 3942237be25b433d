package reactions

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNormalizeEnforcesTheRecordLimits(t *testing.T) {
	ok := Planned{Key: "k", Type: "mail.send", Version: 1, Payload: json.RawMessage(`{"b":1, "a":[true,null,"x<y"]}`)}
	got, err := Normalize([]Planned{ok})
	if err != nil {
		t.Fatal(err)
	}
	// Sorted keys, no whitespace, no HTML escaping; default attempts.
	if string(got[0].Payload) != `{"a":[true,null,"x<y"],"b":1}` || got[0].MaxAttempts != 10 {
		t.Fatalf("normalized %+v (%s)", got[0], got[0].Payload)
	}
	deep := strings.Repeat("[", 17) + strings.Repeat("]", 17)
	bad := map[string]Planned{
		"empty key":        {Key: "", Type: "t", Version: 1},
		"long key":         {Key: strings.Repeat("k", 257), Type: "t", Version: 1},
		"type with space":  {Key: "k", Type: "send mail", Version: 1},
		"long type":        {Key: "k", Type: strings.Repeat("t", 129), Version: 1},
		"zero version":     {Key: "k", Type: "t", Version: 0},
		"attempts 101":     {Key: "k", Type: "t", Version: 1, MaxAttempts: 101},
		"negative tries":   {Key: "k", Type: "t", Version: 1, MaxAttempts: -1},
		"17 levels":        {Key: "k", Type: "t", Version: 1, Payload: json.RawMessage(deep)},
		"infinite number":  {Key: "k", Type: "t", Version: 1, Payload: json.RawMessage(`{"x":1e999}`)},
		"not json":         {Key: "k", Type: "t", Version: 1, Payload: json.RawMessage(`{"x":`)},
		"two documents":    {Key: "k", Type: "t", Version: 1, Payload: json.RawMessage(`1 2`)},
		"over 64 KiB":      {Key: "k", Type: "t", Version: 1, Payload: json.RawMessage(`"` + strings.Repeat("a", 65535) + `"`)},
		"invalid utf8 key": {Key: "\xff", Type: "t", Version: 1},
	}
	for name, p := range bad {
		if _, err := Normalize([]Planned{p}); !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("%s: %v, want ErrInvalidRecord", name, err)
		}
	}
	if _, err := Normalize([]Planned{ok, ok}); !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("a repeated key: %v", err)
	}
	many := make([]Planned, 101)
	for i := range many {
		many[i] = Planned{Key: strings.Repeat("k", i+1), Type: "t", Version: 1}
	}
	if _, err := Normalize(many); !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("101 records: %v", err)
	}
	if _, err := Normalize(many[:100]); err != nil {
		t.Errorf("100 records: %v", err)
	}
	// 16 levels is the limit, not over it.
	if _, err := Normalize([]Planned{{Key: "k", Type: "t", Version: 1, Payload: json.RawMessage(strings.Repeat("[", 16) + strings.Repeat("]", 16))}}); err != nil {
		t.Errorf("16 levels: %v", err)
	}
}

func TestIdempotencyKeyIsTheJSONTuple(t *testing.T) {
	got := IdempotencyKey(`p"1`, "c#1", "<cc>", "k,1")
	var tuple []string
	if err := json.Unmarshal([]byte(got), &tuple); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if len(tuple) != 4 || tuple[0] != `p"1` || tuple[1] != "c#1" || tuple[2] != "<cc>" || tuple[3] != "k,1" {
		t.Fatalf("tuple %q", tuple)
	}
	if got != `["p\"1","c#1","<cc>","k,1"]` {
		t.Fatalf("key %s is not JSON.stringify's", got)
	}
}

func TestBackoffIsBoundedExponential(t *testing.T) {
	r := &Runner{}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	for i, w := range want {
		if got := r.backoff(i + 1); got != w {
			t.Errorf("attempt %d: %v, want %v", i+1, got, w)
		}
	}
	if got := r.backoff(40); got != 5*time.Minute {
		t.Errorf("attempt 40: %v, want the 5 min cap", got)
	}
}
