package validate

import (
	"encoding/json"
	"errors"

	"github.com/skyfold/syncular-lambda/internal/core/wire"
)

// Details are the bounded recovery hints of a rejection (§6.3.1): the
// fields to focus, a machine reason and action, and references the host
// vouches are safe to show the actor. They reach the client in the
// PUSH_RESULT_DETAILS companion frame, never as prose or row contents.
type Details struct {
	FieldPaths     []string          `json:"fieldPaths,omitempty"`
	Reason         string            `json:"reason,omitempty"`
	RequiredAction string            `json:"requiredAction,omitempty"`
	References     map[string]string `json:"references,omitempty"`
}

// Rejection is a deliberate host rejection: the commit is rejected with
// Code and Message on the terminating operation (§6.3, §6.7). Build one
// with Reject or RejectOp, which check the code and details.
type Rejection struct {
	// OpIndex is the operation a whole-commit rejection names (RejectOp);
	// Attributed is false for Reject, which a row validator attributes to
	// its own operation and a commit validator to the first one.
	OpIndex    int
	Attributed bool
	Code       string
	Message    string
	// DetailsJSON is the normalized §6.3.1 details object, "" for none.
	DetailsJSON string
}

func (r *Rejection) Error() string { return "validation rejected: " + r.Code + ": " + r.Message }

// Reject builds a deliberate rejection with a host code (never in a
// reserved protocol family, §6.7), a public message, and optional
// details. An invalid code or details make it a *HostBugError instead:
// the server then answers sync.constraint_violation and logs the bug.
func Reject(code, message string, d *Details) error {
	r := &Rejection{Code: code, Message: message}
	if err := CheckCode(code); err != nil {
		return err
	}
	if d != nil {
		norm, err := normalize(d)
		if err != nil {
			return err
		}
		r.DetailsJSON = norm
	}
	return r
}

// RejectOp is Reject for a whole-commit validator, attributing the
// rejection to operation opIndex of the commit (§6.8).
func RejectOp(opIndex int, code, message string, d *Details) error {
	err := Reject(code, message, d)
	if r, ok := errors.AsType[*Rejection](err); ok {
		r.OpIndex, r.Attributed = opIndex, true
	}
	return err
}

// normalize checks d against the §6.3.1 bounds and returns its
// normalized JSON.
func normalize(d *Details) (string, error) {
	raw, err := json.Marshal(d)
	if err != nil {
		return "", &HostBugError{What: "rejection details do not encode: " + err.Error()}
	}
	norm, err := wire.NormalizeDetailsJSON(string(raw))
	if err != nil {
		return "", &HostBugError{What: "rejection details are outside the §6.3.1 shape: " + err.Error()}
	}
	return norm, nil
}
