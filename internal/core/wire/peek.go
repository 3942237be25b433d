package wire

import (
	"encoding/binary"
	"unicode/utf8"
)

// PeekClientID reads the clientId of a request from the first bytes of its
// envelope (§1.2 header, then the REQ_HEADER frame, §1.5, whose first field
// is clientId), without decoding or validating the rest. It lets a host
// name the client of a request it refuses unread, e.g. a body over the
// request cap, of which it keeps only a prefix. ok is false when prefix is
// not a request of a supported wire version that opens with a REQ_HEADER,
// or is too short to hold the whole clientId, or the clientId is empty,
// over maxLen bytes or not UTF-8. The result is for logs only: nothing is
// authorized by it.
func PeekClientID(prefix []byte, maxLen int) (string, bool) {
	_, k, err := parseHeader(prefix)
	if err != nil || k != KindRequest {
		return "", false
	}
	const at = headerLen + frameHeaderLen
	if len(prefix) < at+4 || FrameType(prefix[headerLen]) != FrameReqHeader {
		return "", false
	}
	frameLen := binary.LittleEndian.Uint32(prefix[headerLen+1:])
	n := binary.LittleEndian.Uint32(prefix[at:])
	if n == 0 || uint64(n) > uint64(maxLen) || uint64(n)+4 > uint64(frameLen) || len(prefix)-at-4 < int(n) {
		return "", false
	}
	id := prefix[at+4 : at+4+int(n)]
	if !utf8.Valid(id) {
		return "", false
	}
	return string(id), true
}
