package conformancehost

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/skyfold/syncular-lambda/internal/core/rowcodec"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// u8 is a Uint8Array crossing the control seam as {"$u8": "<base64>"}.
type u8 []byte

// MarshalJSON encodes b as {"$u8": "<standard base64>"}.
func (b u8) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]string{"$u8": base64.StdEncoding.EncodeToString(b)})
}

// UnmarshalJSON accepts {"$u8": "<base64>"} (padded or not).
func (b *u8) UnmarshalJSON(data []byte) error {
	var w struct {
		U8 *string `json:"$u8"`
	}
	if err := json.Unmarshal(data, &w); err != nil || w.U8 == nil {
		return errors.New(`want {"$u8": "<base64>"}`)
	}
	raw, err := base64.StdEncoding.DecodeString(*w.U8)
	if err != nil {
		raw, err = base64.RawStdEncoding.DecodeString(*w.U8)
	}
	if err != nil {
		return fmt.Errorf("$u8 is not base64: %v", err)
	}
	*b = raw
	return nil
}

// driverError is the driver-seam §10.1 error (DriverError in driver.ts).
type driverError struct {
	Code              string `json:"code"`
	Message           string `json:"message"`
	Category          string `json:"category,omitempty"`
	Retryable         bool   `json:"retryable"`
	RecommendedAction string `json:"recommendedAction,omitempty"`
}

// bytesResult is BytesResult: {ok: true, bytes} or {ok: false, error}.
type bytesResult struct {
	OK    bool         `json:"ok"`
	Bytes u8           `json:"bytes,omitempty"`
	Error *driverError `json:"error,omitempty"`
}

func okBytes(b []byte) bytesResult {
	if b == nil {
		b = []byte{}
	}
	return bytesResult{OK: true, Bytes: b}
}

func failBytes(err error) bytesResult {
	de := toDriverError(err)
	return bytesResult{Error: &de}
}

// toDriverError renders err in the §10.1 shape (internal failures keep a
// generic catalog code).
func toDriverError(err error) driverError {
	se := syncerr.Internal(err)
	b := se.Body()
	return driverError{Code: string(b.Code), Message: b.Message, Category: b.Category, Retryable: b.Retryable, RecommendedAction: b.RecommendedAction}
}

// driverValue converts one decoded column value to its DriverRowValue
// JSON form: bytes and crdt as {"$bytes": lowercase hex}, json and
// blob_ref as their raw text, numbers, booleans and null as themselves.
func driverValue(t rowcodec.Type, v rowcodec.Value) any {
	if b, ok := v.Plain(t).([]byte); ok {
		return map[string]string{"$bytes": hex.EncodeToString(b)}
	}
	return v.Plain(t)
}
