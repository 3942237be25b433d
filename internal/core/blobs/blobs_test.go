package blobs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestParseID(t *testing.T) {
	sum := sha256.Sum256([]byte("abc"))
	h := hex.EncodeToString(sum[:])
	if got, ok := ParseID("sha256:" + h); !ok || got != sum {
		t.Fatalf("canonical id rejected")
	}
	for _, bad := range []string{"", h, "sha256:" + strings.ToUpper(h), "sha256:" + h[1:], "sha256:" + h + "0", "SHA256:" + h, "sha256:" + h[:63] + "g"} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}

func TestParseRef(t *testing.T) {
	id := IDOfBytes([]byte("x"))
	r, ok := ParseRef(`{"blobId":"` + id + `","byteLength":1,"mediaType":"text/plain","name":"x.txt"}`)
	if !ok || r.BlobID != id || r.ByteLength != 1 {
		t.Fatalf("ParseRef: %+v %v", r, ok)
	}
	if _, ok := ParseRef(`{"byteLength":1,"blobId":"` + id + `"}`); ok {
		t.Fatal("non-canonical key order accepted (§5.9.1)")
	}
}

func TestReadVerified(t *testing.T) {
	body := []byte("hello")
	id := IDOfBytes(body)
	if got, err := ReadVerified(bytes.NewReader(body), id, 5); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("exact size: %q %v", got, err)
	}
	if _, err := ReadVerified(bytes.NewReader(body), id, 4); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := ReadVerified(bytes.NewReader([]byte("hellO")), id, 5); !errors.Is(err, ErrHashMismatch) {
		t.Fatalf("other bytes: %v", err)
	}
}
