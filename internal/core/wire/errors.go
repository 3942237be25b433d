package wire

import (
	"fmt"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// invalidf builds the decode error every §1.7 violation maps to, except an
// empty PUSH_COMMIT (sync.empty_commit).
func invalidf(format string, args ...any) *syncerr.Error {
	return syncerr.New(syncerr.InvalidRequest, format, args...)
}

// frameErr prefixes a payload error with the frame position so a caller
// can locate the offending frame; the catalog code is kept as is.
func frameErr(index int, t FrameType, err error) error {
	if se := syncerr.As(err); se != nil {
		out := syncerr.New(se.Code, "frame %d (%s): %s", index, t, se.Message)
		if c := se.Unwrap(); c != nil {
			out = syncerr.Wrap(c, se.Code, "frame %d (%s): %s", index, t, se.Message)
		}
		return out
	}
	return fmt.Errorf("frame %d (%s): %w", index, t, err)
}

// encodeErr is the error of an encoder refusing a value the decoder would
// reject (or one the wire cannot represent). It is a programming error of
// the producer, not of a peer, so it is not a catalog error.
type encodeErr struct{ msg string }

func (e *encodeErr) Error() string { return "wire: encode: " + e.msg }

func encErrf(format string, args ...any) error {
	return &encodeErr{msg: fmt.Sprintf(format, args...)}
}

// withFrame prefixes an encoder error with the frame position.
func withFrame(i int, err error) error {
	if ee, ok := err.(*encodeErr); ok {
		return &encodeErr{msg: fmt.Sprintf("frame %d: %s", i, ee.msg)}
	}
	return fmt.Errorf("frame %d: %w", i, err)
}
