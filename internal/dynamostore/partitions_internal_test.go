package dynamostore

import (
	"context"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/skyfold/syncular-lambda/internal/core/store"
	"github.com/skyfold/syncular-lambda/internal/testenv"
)

// TestListPartitions: every partition comes back exactly once with its
// name decoded, across Scan pages, and nothing else in the table does.
func TestListPartitions(t *testing.T) {
	c := testenv.DynamoDB(t).Client(t)
	table := testenv.UniqueName(t, "parts")
	ctx := context.Background()
	if err := CreateTable(ctx, c, table); err != nil {
		t.Fatal(err)
	}
	s := New(c, table, Options{})
	old := partitionScanLimit
	partitionScanLimit = 3 // many pages, several of them empty after the filter
	t.Cleanup(func() { partitionScanLimit = old })

	list := func() []string {
		t.Helper()
		var got []string
		if err := s.ListPartitions(ctx, func(p string) bool { got = append(got, p); return true }); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("empty table lists %q", got)
	}

	want := []string{
		"default", "a#b", "100%", "%23", "%2523", "#", "%", "%%##", "",
		"ünï#cødé 🚀", "P#x", "x#HEAD", "HEAD", "tab\there",
	}
	for i, p := range want {
		if _, err := s.TouchPartition(ctx, p, 1, "e"); err != nil {
			t.Fatalf("touch %q: %v", p, err)
		}
		// Items of every other kind under the partition.
		req := &store.CommitRequest{
			Commit:  store.Commit{Seq: 1, CreatedAtMs: 1, ClientID: "HEAD", ClientCommitID: "EAD"},
			Outcome: store.Outcome{Applied: true, CommitSeq: 1},
		}
		if i%2 == 0 {
			if err := s.Commit(ctx, p, req); err != nil {
				t.Fatalf("commit %q: %v", p, err)
			}
		}
		if err := s.PutClient(ctx, p, &store.Client{ClientID: "EAD", Cursor: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// Items with sk HEAD that are not partition heads: a grant of actor
	// "HEAD" and keys headPK cannot produce.
	for _, pk := range []string{"GRANT#default", "P#a#b", "P#a%zz", "P#a%2", "P#a%", "P#x#C", "SEG#00", "Q#HEAD"} {
		_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: Key(pk, "HEAD")})
		if err != nil {
			t.Fatal(err)
		}
	}

	slices.Sort(want)
	if got := list(); !slices.Equal(got, want) {
		t.Fatalf("ListPartitions = %q\nwant %q", got, want)
	}

	// fn returning false stops the scan.
	n := 0
	if err := s.ListPartitions(ctx, func(string) bool { n++; return n < 2 }); err != nil || n != 2 {
		t.Fatalf("stopped listing: %d calls, %v; want 2", n, err)
	}

	// Each listed name addresses its partition.
	for _, p := range want {
		if _, ok, err := s.Head(ctx, p); err != nil || !ok {
			t.Fatalf("Head(%q) of a listed partition: ok=%v err=%v", p, ok, err)
		}
	}
}

func TestPartitionOfHeadPK(t *testing.T) {
	for _, tc := range []struct {
		pk   string
		want string
		ok   bool
	}{
		{"P#", "", true},
		{"P#default", "default", true},
		{"P#a%23b", "a#b", true},
		{"P#100%25", "100%", true},
		{"P#%2523", "%23", true},
		{"P#ü%23🚀", "ü#🚀", true},
		{"P#a#b", "", false},
		{"P#a%2", "", false},
		{"P#a%", "", false},
		{"P#a%41", "", false},
		{"P#a%2a", "", false},
		{"GRANT#x", "", false},
		{"p#x", "", false},
		{"", "", false},
	} {
		got, ok := partitionOfHeadPK(tc.pk)
		if got != tc.want || ok != tc.ok {
			t.Errorf("partitionOfHeadPK(%q) = %q, %v; want %q, %v", tc.pk, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzPartitionPKRoundTrip: partitionOfHeadPK inverts headPK exactly; it
// accepts a pk only when headPK of the result rebuilds it.
func FuzzPartitionPKRoundTrip(f *testing.F) {
	for _, s := range []string{"", "a#b", "%", "%23", "%2523", "P#x", "ü#🚀", "%%##"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if utf8.ValidString(s) {
			if p, ok := partitionOfHeadPK(headPK(s)); !ok || p != s {
				t.Fatalf("partitionOfHeadPK(headPK(%q)) = %q, %v", s, p, ok)
			}
		}
		if p, ok := partitionOfHeadPK(s); ok && headPK(p) != s {
			t.Fatalf("partitionOfHeadPK(%q) = %q, but headPK of it is %q", s, p, headPK(p))
		}
	})
}
