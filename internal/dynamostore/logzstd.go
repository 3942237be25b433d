package dynamostore

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Compressed log bodies (format 3, issue 23). A commit's log item is
// written inside its commit transaction, where DynamoDB charges 2 WCU per
// started KB, and a large commit's body (every change's row) is most of
// it: a 50-row insert's 5 KB item was 10 of the push's write units. A
// body of at least logZstdMin bytes is therefore stored as
//
//	u8      format 3
//	[zstd]  one zstd frame of the whole format-2 body (its own format
//	        byte included)
//
// when that is smaller; otherwise, and for every small commit, the body
// stays as encodeLogBody wrote it (format 2), so a 1-op push pays no
// compression and its readers no decompression. decodeLogBody takes
// formats 1, 2 and 3: log items written before stay readable, and a
// format-3 frame must hold a format 1 or 2 body (no nesting). The frame
// carries its content size and decoding is capped at logZstdMaxBytes, so
// a corrupt or hostile item cannot make a reader allocate without bound.
//
// Compression changes what is stored, not when: the compressed body is
// built once in prepare, before the commit transaction, and is the only
// copy written (log chunks, the small-commit head), so every guarantee of
// the log item (put-if-absent in the commit point, immutable afterwards)
// holds unchanged; roll-forward and pulls decode it like any body.
//
// A build from before format 3 cannot read such a body (as a build from
// before format 2 could not read column versions): after a rollback to
// it, pulls over the commits written meanwhile and their roll-forward
// fail as corrupt data until a build that reads format 3 is back. The
// writer fence does not cover this (it follows the app's schema
// versions, not the store's formats), so roll back only to a build that
// has this file.
const (
	logFormatZstd = 3
	// logZstdMin: smaller bodies fit their item's first KB anyway.
	logZstdMin = 512
	// logZstdMaxBytes bounds a decompressed body: far above what the
	// engine lets one commit carry (package limits).
	logZstdMaxBytes = 64 << 20
)

// The coder pair is built on first use, so a function that never meets
// a large body (a segment download, a quiet pull) pays nothing at init.
var (
	logZstdEncoder = sync.OnceValue(mustZstdEncoder)
	logZstdDecoder = sync.OnceValue(mustZstdDecoder)
)

func mustZstdEncoder() *zstd.Encoder {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithLowerEncoderMem(true), zstd.WithEncoderCRC(false))
	if err != nil {
		panic(fmt.Sprintf("dynamostore: zstd encoder: %v", err))
	}
	return e
}

func mustZstdDecoder() *zstd.Decoder {
	d, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(logZstdMaxBytes), zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderLowmem(true))
	if err != nil {
		panic(fmt.Sprintf("dynamostore: zstd decoder: %v", err))
	}
	return d
}

// packLogBody returns body in format 3 when that is smaller, else body.
func packLogBody(body []byte) []byte {
	if len(body) < logZstdMin {
		return body
	}
	out := make([]byte, 1, len(body))
	out[0] = logFormatZstd
	out = logZstdEncoder().EncodeAll(body, out)
	if len(out) >= len(body) {
		return body // incompressible: stored as it is
	}
	return out
}

// unpackLogBody returns the format 1 or 2 body inside a format-3 body.
func unpackLogBody(b []byte) ([]byte, error) {
	inner, err := logZstdDecoder().DecodeAll(b[1:], nil)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: compressed log body: %v: %w", err, errCorrupt)
	}
	if len(inner) == 0 || inner[0] == logFormatZstd {
		return nil, fmt.Errorf("dynamostore: compressed log body holds no plain body: %w", errCorrupt)
	}
	return inner, nil
}
