// Package limits derives, in one place, every size limit the server
// enforces from the platform quotas it runs under: API Gateway's HTTP API,
// Lambda's synchronous invocation payload and DynamoDB's key, item and
// transaction limits. The local runner, the Lambda adapter, the HTTP
// surface and the engine all read these numbers; none restates them.
//
// The derivation, in short:
//
//   - A request reaches the function as a JSON event whose body is base64
//     (the SSP2 body is binary), and Lambda refuses events over 6 MiB, so
//     the largest body a client can send is 3/4 of (6 MiB minus the event's
//     other members): MaxRequestBodyBytes ≈ 4.45 MiB, well under API
//     Gateway's own 10 MB. Anything larger never runs our code.
//   - A response travels the same way back: MaxResponseBodyBytes is the
//     largest encoded body whose base64 form, with the response document
//     around it, stays under 6 MiB.
//   - One commit must fit one DynamoDB TransactWriteItems (4 MB) with its
//     head update and outcome, every row item must fit 400 KB, and every
//     key must fit DynamoDB's 2048-byte partition and 1024-byte sort key
//     once this project's prefixes and escaping are added
//     (internal/dynamostore/keys.go). The engine checks these for every
//     store, so the in-memory store and DynamoDB answer identically.
//   - A commit must also be deliverable: its largest COMMIT frame (one
//     table's changes, §4.5 never splits a commit) must fit one pull
//     response, or every pull that reaches it would fail.
package limits

// Platform quotas (hard, not configurable by the account).
const (
	// APIGatewayRequestBytes is the HTTP API request payload quota.
	APIGatewayRequestBytes = 10 << 20
	// LambdaPayloadBytes is Lambda's synchronous invocation limit for the
	// request event and for the response document (6 MiB).
	LambdaPayloadBytes = 6 << 20
	// DynamoItemBytes is DynamoDB's item size limit (400 KB).
	DynamoItemBytes = 400 << 10
	// DynamoTransactionBytes is TransactWriteItems' aggregate size limit.
	DynamoTransactionBytes = 4 << 20
	// DynamoTransactionActions is TransactWriteItems' action limit.
	DynamoTransactionActions = 100
	// DynamoPartitionKeyBytes and DynamoSortKeyBytes are the key limits.
	DynamoPartitionKeyBytes = 2048
	DynamoSortKeyBytes      = 1024
)

// Reserves for what travels beside a body in a Lambda payload.
const (
	// EventReserveBytes covers the request event's other members: HTTP
	// API caps the request line and headers at 10 KB, plus requestContext,
	// authorizer claims and JSON syntax.
	EventReserveBytes = 64 << 10
	// ResponseReserveBytes covers the response document's status, headers
	// and JSON syntax.
	ResponseReserveBytes = 16 << 10
)

// Transport limits.
const (
	// MaxRequestBodyBytes is the largest request body (as sent, before
	// any gzip decoding) that reaches the function: 4,669,440 bytes.
	MaxRequestBodyBytes = min(APIGatewayRequestBytes, (LambdaPayloadBytes-EventReserveBytes)/4*3)
	// MaxResponseBodyBytes is the largest response body (as sent, after
	// compression) that Lambda can return: 4,706,304 bytes.
	MaxResponseBodyBytes = (LambdaPayloadBytes - ResponseReserveBytes) / 4 * 3
	// DefaultDecodedBodyBytes caps a request body after gzip decoding. It
	// is larger than MaxRequestBodyBytes so that every body that arrives
	// uncompressed is read (and oversized commits in it are answered one
	// by one), while a gzip bomb is refused.
	DefaultDecodedBodyBytes = 32 << 20
	// MaxDecodedBodyBytes is the most the decoded cap may be configured to.
	MaxDecodedBodyBytes = 64 << 20
	// DefaultResponseBudgetBytes is where a pull response stops adding
	// commits, pages and push results (raw bytes, before compression).
	DefaultResponseBudgetBytes = 4 << 20
	// MaxResponseBudgetBytes keeps room under MaxResponseBodyBytes for the
	// frames a response writes after its last budget check (SUB_END and
	// the sections of later subscriptions).
	MaxResponseBudgetBytes = MaxResponseBodyBytes - 256<<10
	// MaxCommitFrameBytes is the largest COMMIT frame (one table's
	// changes of one commit) a pull may have to deliver: it must fit an
	// uncompressed response with the frames that precede it.
	MaxCommitFrameBytes = MaxResponseBudgetBytes
)

// Storage limits, checked by the engine before any store sees a commit.
const (
	// MaxCommitBytes bounds one commit's changes (the encoded size of its
	// log entry): it must fit one TransactWriteItems with the head update,
	// the outcome item and the per-chunk key overhead.
	MaxCommitBytes = DynamoTransactionBytes - 256<<10
	// MaxRowBytes bounds one stored row (rowId, stored scopes and payload):
	// its item adds the table's key prefixes and a few attributes.
	MaxRowBytes = DynamoItemBytes - 8<<10
)

// Identifier limits (bytes of UTF-8). With the key layout of
// internal/dynamostore, the longest key is the push outcome's partition
// key "P#<partition>#O#<clientId>", where escaping may triple both names:
// 2 + 3·256 + 3 + 3·256 = 1541 ≤ 2048. Sort keys are one prefix letter
// plus one identifier: at most 1 + 512 ≤ 1024.
const (
	// MaxPartitionBytes bounds the partition (tenant) name from the token.
	MaxPartitionBytes = 256
	// MaxClientIDBytes bounds clientId (§1.5).
	MaxClientIDBytes = 256
	// MaxClientCommitIDBytes bounds clientCommitId (§2.3, §6.1).
	MaxClientCommitIDBytes = 256
	// MaxRowIDBytes bounds rowId, the text of a primary key value.
	MaxRowIDBytes = 512
	// MaxScopeValueBytes bounds one scope value, stored with every row
	// and change and requested by subscriptions.
	MaxScopeValueBytes = 512
	// MaxTableNameBytes bounds table names on the wire; it is the schema's
	// identifier limit (PostgreSQL's), so no longer name is ever served.
	MaxTableNameBytes = 63
)
