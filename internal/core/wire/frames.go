// Package wire is the SSP2 envelope codec (SPEC §1.2–§1.7): the 8-byte
// header, every registered frame of request and response messages, the
// frame grammar, unknown-frame preservation and the debug rendering (§11.1).
//
// Frame payloads are plain structs. Binary fields ([]byte) returned by the
// decoder alias the input buffer: callers that keep them past the input's
// lifetime copy them.
package wire

// Magic is the envelope magic "SSP2".
var Magic = [4]byte{'S', 'S', 'P', '2'}

// Wire versions this codec reads and writes. The 0.15.48 spec's window is
// [1, 2]; the 0.21+ spec's is [3] (§1.2, §9). This server serves both
// generations, so the codec reads and writes 1, 2 and 3 and every response
// is encoded in its request's version. Version 2 adds logEpoch to
// REQ_HEADER and logEpoch/resetRequired to RESP_HEADER (kept in 3);
// version 3 changes only the push payload layout (sparse rows, §2.4, which
// this package carries as opaque bytes) and appends conflictColumns to
// conflict records (§6.3).
const (
	Version1 uint16 = 1
	Version2 uint16 = 2
	// Version3 is the wire version of every stock client since 0.21: sparse
	// push payloads (§2.4) and conflictColumns in conflict records (§6.3).
	Version3 uint16 = 3
)

// SupportedVersion reports whether v is a wire version this codec reads
// and writes.
func SupportedVersion(v uint16) bool { return v >= Version1 && v <= Version3 }

// MsgKind is the envelope message kind byte.
type MsgKind uint8

const (
	KindRequest  MsgKind = 0x01
	KindResponse MsgKind = 0x02
)

// FrameType is the frame type byte of the §1.2 registry.
type FrameType uint8

const (
	FrameEnd               FrameType = 0x00
	FrameReqHeader         FrameType = 0x01
	FramePushCommit        FrameType = 0x02
	FramePullHeader        FrameType = 0x03
	FrameSubscription      FrameType = 0x04
	FrameRespHeader        FrameType = 0x10
	FramePushResult        FrameType = 0x11
	FrameSubStart          FrameType = 0x12
	FrameCommit            FrameType = 0x13
	FrameSegmentRef        FrameType = 0x14
	FrameSegmentInline     FrameType = 0x15
	FrameSubEnd            FrameType = 0x16
	FrameLease             FrameType = 0x19
	FramePushResultDetails FrameType = 0x1B
	FrameError             FrameType = 0x1F
)

// Opt is an opt(T) field (Conventions): Present false means absent.
type Opt[T any] struct {
	Value   T
	Present bool
}

// Some returns a present Opt holding v.
func Some[T any](v T) Opt[T] { return Opt[T]{Value: v, Present: true} }

// JSON is a `json`-typed field: the raw document text, preserved verbatim.
type JSON string

// ScopeEntry is one key of a map str → list(str).
type ScopeEntry struct {
	Key    string
	Values []string
}

// ScopeMap is a map str → list(str) (requested or effective scopes) in
// wire order. Decoded maps are in canonical order; the encoder sorts keys
// by UTF-16 code units and rejects duplicates.
type ScopeMap []ScopeEntry

// StoredScope is one key of a map str → str.
type StoredScope struct {
	Key   string
	Value string
}

// StoredScopes is a map str → str (a change's stored scopes, §3.1) in
// wire order, canonical like ScopeMap.
type StoredScopes []StoredScope

// Op is the change/operation kind.
type Op uint8

const (
	OpUpsert Op = 1
	OpDelete Op = 2
)

// Frame is any frame payload. Unknown frames preserved by the skip rule
// are *Unknown.
type Frame interface {
	Type() FrameType
}

// Message is a decoded SSP2 message: header fields and frames in wire
// order, END excluded.
type Message struct {
	WireVersion uint16
	Kind        MsgKind
	Frames      []Frame
}

// ReqHeader is the REQ_HEADER payload (§1.5). LogEpoch exists in wire
// version 2 only.
type ReqHeader struct {
	ClientID      string
	SchemaVersion int32
	LogEpoch      Opt[string]
}

// PushCommit is the PUSH_COMMIT payload (§6.1).
type PushCommit struct {
	ClientCommitID string
	Operations     []Operation
}

// Operation is one push operation record (§6.1). Payload is present iff
// Op is OpUpsert.
type Operation struct {
	Table       string
	RowID       string
	Op          Op
	BaseVersion Opt[int64]
	Payload     Opt[[]byte]
}

// PullHeader is the PULL_HEADER payload (§4.2).
type PullHeader struct {
	LimitCommits      int32
	LimitSnapshotRows int32
	MaxSnapshotPages  int32
	Accept            uint8
}

// Accept bits (§4.2).
const (
	AcceptInlineRows   uint8 = 1 << 0
	AcceptExternalRows uint8 = 1 << 1
	AcceptSQLite       uint8 = 1 << 2
	AcceptSignedURL    uint8 = 1 << 3
)

// Subscription is the SUBSCRIPTION payload (§4.3).
type Subscription struct {
	ID             string
	Table          string
	Scopes         ScopeMap
	Params         Opt[JSON]
	Cursor         int64
	BootstrapState Opt[JSON]
}

// RespHeader is the RESP_HEADER payload (§1.6). LogEpoch and
// ResetRequired exist in wire version 2 only.
type RespHeader struct {
	RequiredSchemaVersion Opt[int32]
	LatestSchemaVersion   Opt[int32]
	LogEpoch              string
	ResetRequired         bool
}

// Lease is the LEASE payload (§7.3.2).
type Lease struct {
	LeaseID     string
	ExpiresAtMs int64
}

// PushStatus is PUSH_RESULT.status (§6.3).
type PushStatus uint8

const (
	PushApplied  PushStatus = 1
	PushCached   PushStatus = 2
	PushRejected PushStatus = 3
)

// PushResult is the PUSH_RESULT payload (§6.3). CommitSeq is present iff
// Status is applied or cached.
type PushResult struct {
	ClientCommitID string
	Status         PushStatus
	CommitSeq      Opt[int64]
	Results        []OpResult
}

// OpResultStatus is the tag of a push result record.
type OpResultStatus uint8

const (
	OpApplied  OpResultStatus = 1
	OpConflict OpResultStatus = 2
	OpError    OpResultStatus = 3
)

// OpResult is one push result record, a tagged union on Status: applied
// uses no further field; conflict uses Code, Message, ServerVersion and
// ServerRow; error uses Code, Message and Retryable.
type OpResult struct {
	OpIndex       int32
	Status        OpResultStatus
	Code          string
	Message       string
	ServerVersion int64
	ServerRow     []byte
	// ConflictColumns (wire version 3 only, conflict records) is a
	// presence bitmap over the table's columns marking the columns that
	// conflicted (§6.3); empty under versions 1 and 2.
	ConflictColumns []byte
	Retryable       bool
}

// PushResultDetails is the PUSH_RESULT_DETAILS payload (§6.3.1).
type PushResultDetails struct {
	ClientCommitID string
	Entries        []DetailEntry
}

// DetailEntry is one PUSH_RESULT_DETAILS entry; DetailsJSON is the
// normalized bounded JSON object of §6.3.1.
type DetailEntry struct {
	OpIndex     int32
	DetailsJSON string
}

// SubStatus is SUB_START.status (§4.4).
type SubStatus uint8

const (
	SubActive  SubStatus = 1
	SubRevoked SubStatus = 2
	SubReset   SubStatus = 3
)

// SubStart is the SUB_START payload (§4.4).
type SubStart struct {
	ID              string
	Status          SubStatus
	ReasonCode      string
	EffectiveScopes ScopeMap
	Bootstrap       bool
}

// Commit is the COMMIT payload (§4.5).
type Commit struct {
	CommitSeq   int64
	CreatedAtMs int64
	ActorID     string
	Tables      []string
	Changes     []Change
}

// Change is one COMMIT change record (§4.5). RowVersion and Row are
// present iff Op is OpUpsert.
type Change struct {
	TableIndex uint16
	RowID      string
	Op         Op
	RowVersion Opt[int64]
	Scopes     StoredScopes
	Row        Opt[[]byte]
}

// MediaType is a segment media type (§5.4).
type MediaType uint8

const (
	MediaRows   MediaType = 1
	MediaSQLite MediaType = 2
)

// SegmentRef is the SEGMENT_REF descriptor (§5.4). URLExpiresAtMs is
// present iff URL is.
type SegmentRef struct {
	SegmentID      string
	MediaType      MediaType
	Table          string
	ByteLength     int64
	RowCount       int64
	AsOfCommitSeq  int64
	ScopeDigest    string
	RowCursor      Opt[string]
	NextRowCursor  Opt[string]
	URL            Opt[string]
	URLExpiresAtMs Opt[int64]
}

// SegmentInline is the SEGMENT_INLINE payload (§5.7): one whole rows
// segment, structurally validated at decode.
type SegmentInline struct {
	Payload []byte
}

// SubEnd is the SUB_END payload (§4.4).
type SubEnd struct {
	NextCursor     int64
	BootstrapState Opt[JSON]
}

// ErrorFrame is the in-band ERROR payload (§1.6).
type ErrorFrame struct {
	Code              string
	Message           string
	Category          string
	Retryable         bool
	RecommendedAction string
	Details           Opt[JSON]
}

// Unknown is a frame whose type has no layout in this wire version,
// preserved byte-for-byte (§1.2 rule 2).
type Unknown struct {
	FrameType FrameType
	Payload   []byte
}

func (*ReqHeader) Type() FrameType         { return FrameReqHeader }
func (*PushCommit) Type() FrameType        { return FramePushCommit }
func (*PullHeader) Type() FrameType        { return FramePullHeader }
func (*Subscription) Type() FrameType      { return FrameSubscription }
func (*RespHeader) Type() FrameType        { return FrameRespHeader }
func (*Lease) Type() FrameType             { return FrameLease }
func (*PushResult) Type() FrameType        { return FramePushResult }
func (*PushResultDetails) Type() FrameType { return FramePushResultDetails }
func (*SubStart) Type() FrameType          { return FrameSubStart }
func (*Commit) Type() FrameType            { return FrameCommit }
func (*SegmentRef) Type() FrameType        { return FrameSegmentRef }
func (*SegmentInline) Type() FrameType     { return FrameSegmentInline }
func (*SubEnd) Type() FrameType            { return FrameSubEnd }
func (*ErrorFrame) Type() FrameType        { return FrameError }
func (u *Unknown) Type() FrameType         { return u.FrameType }

// Request is the typed view of a decoded request message (§1.5).
type Request struct {
	WireVersion   uint16
	Header        ReqHeader
	Commits       []PushCommit
	Pull          *PullHeader
	Subscriptions []Subscription
}
