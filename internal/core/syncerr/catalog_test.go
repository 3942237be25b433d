package syncerr

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// The §10.1 action verbs and the categories §10.2 uses; every catalog
// entry must use one of each.
var (
	actions    = "refreshAuth checkPermissions fixRequest resetClientId regenerateClient upgradeClient resolveConflict rebootstrap forceResync retryLater splitBatch inspectServer"
	categories = "not-found forbidden invalid-request internal auth-required schema-mismatch conflict reset-required scope-revoked rate-limited"
)

func TestCatalogEntriesAreWellFormed(t *testing.T) {
	// 36 codes of the version-1/2 catalog plus the five wire version 3
	// added (sync.client_wire_unsupported stays for version-2 clients).
	if len(Codes()) != 41 {
		t.Fatalf("§10.2 lists 36 + 5 wire codes, catalog has %d", len(Codes()))
	}
	for _, c := range Codes() {
		e, _ := Lookup(c)
		if !strings.Contains(" "+actions+" ", " "+e.RecommendedAction+" ") {
			t.Errorf("%s: action %q is not a §10.1 verb", c, e.RecommendedAction)
		}
		if !strings.Contains(" "+categories+" ", " "+e.Category+" ") {
			t.Errorf("%s: unknown category %q", c, e.Category)
		}
		if e.HTTPStatus < 400 || e.HTTPStatus > 599 {
			t.Errorf("%s: status %d", c, e.HTTPStatus)
		}
		// Retryable codes are exactly the ones whose action is to retry or
		// refresh auth (§10.2: auth_required, leases, cache miss, rate
		// limits, segment_expired).
		if e.Retryable != (e.RecommendedAction == "retryLater" || e.RecommendedAction == "refreshAuth") {
			t.Errorf("%s: retryable %v with action %s", c, e.Retryable, e.RecommendedAction)
		}
	}
	if _, ok := Lookup("sync.integrity_rejected"); ok {
		t.Error("sync.integrity_rejected is reserved without a producer (§10.3), not a wire code")
	}
}

func TestBodyShape(t *testing.T) {
	e := New(VersionConflict, "row %s moved", "t1")
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"code": "sync.version_conflict", "category": "conflict", "retryable": false, "recommendedAction": "resolveConflict", "message": "row t1 moved"}
	if fmt.Sprint(m) != fmt.Sprint(want) {
		t.Fatalf("body %v, want %v", m, want)
	}
	e.Details = json.RawMessage(`{"serverVersion":3}`)
	b, _ = json.Marshal(e)
	if !strings.Contains(string(b), `"details":{"serverVersion":3}`) {
		t.Fatalf("details missing: %s", b)
	}
}

func TestUnknownCodePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New with a code outside the catalog must panic")
		}
	}()
	New("sync.made_up", "x")
}

func TestWrapAsStatusAndInternal(t *testing.T) {
	cause := errors.New("dynamodb: secret-ish detail")
	e := Wrap(cause, RateLimited, "throttled")
	wrapped := fmt.Errorf("push: %w", e)
	if As(wrapped) != e || !HasCode(wrapped, RateLimited) || HasCode(wrapped, Forbidden) || !errors.Is(wrapped, cause) {
		t.Fatal("errors.As/Is through wrapping")
	}
	if e.HTTPStatus() != 429 || e.WithStatus(503).HTTPStatus() != 503 || e.HTTPStatus() != 429 {
		t.Fatal("status override must copy")
	}
	in := Internal(cause)
	if in.HTTPStatus() != 500 || strings.Contains(in.Message, "secret") || !errors.Is(in, cause) {
		t.Fatalf("internal error leaks or loses its cause: %+v", in)
	}
	// §10.2 (0.21+): unexpected faults are sync.internal_error, retryable,
	// with the fixed message.
	if in.Code != InternalError || !in.Entry().Retryable || in.Message != InternalMessage {
		t.Fatalf("Internal is %s (retryable %t, message %q), want retryable sync.internal_error", in.Code, in.Entry().Retryable, in.Message)
	}
	if Internal(wrapped) != e {
		t.Fatal("Internal keeps an existing catalog error")
	}
}

func TestForWireKeepsRetryability(t *testing.T) {
	v3only := []Code{RowDeleted, ReferenceViolation, SchemaNotReady, InternalError, StorageStaleRead}
	for _, c := range v3only {
		got := ForWire(c, 2)
		if got == c {
			t.Errorf("ForWire(%s, 2) leaks a version-3 code to a version-2 client", c)
		}
		if catalog[got].Retryable != catalog[c].Retryable {
			t.Errorf("ForWire(%s, 2) = %s changes retryability", c, got)
		}
		if ForWire(c, 3) != c {
			t.Errorf("ForWire(%s, 3) = %s, want unchanged", c, ForWire(c, 3))
		}
	}
	if ForWire(ClientWireUnsupported, 3) == ClientWireUnsupported {
		t.Error("sync.client_wire_unsupported is not in the version-3 catalog")
	}
	if ForWire(VersionConflict, 2) != VersionConflict {
		t.Error("shared codes must pass through unchanged")
	}
}
