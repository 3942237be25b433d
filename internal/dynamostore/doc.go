// Package dynamostore is the DynamoDB implementation of store.Store: one
// table (keys.go has the item layout) written with conditional
// transactions, so commits stay gapless and exactly-once across any
// number of Lambda instances (SPEC §2.1, §2.3, §6.4). Every correctness
// read is strongly consistent; the table has no GSI.
//
// # Push: log first, roll forward
//
// The partition head item carries maxCommitSeq and appliedSeq (every
// commit ≤ appliedSeq has its rows materialized). Commit is one
// TransactWriteItems: head update conditioned on maxCommitSeq =
// appliedSeq = ExpectedMaxSeq, the outcome put-if-absent (§2.3), the log
// item(s) put-if-absent and, when everything fits one transaction
// (100 actions, 4 MB), the row writes, advancing appliedSeq with
// maxCommitSeq. A larger commit advances only maxCommitSeq; its rows are
// materialized afterwards in transactions fenced by a ConditionCheck
// "appliedSeq < seq" on the head, then appliedSeq advances. Any reader
// that depends on rows (GetRows, ScanRows, Commit, Prune) first finishes
// such a commit from the log. The fence, rather than a per-row commitSeq
// condition, is what makes replays safe: once appliedSeq passed a commit
// no stale roller can write, so it can neither regress a row nor
// resurrect one a later commit deleted.
//
// # Reference index (§6.11)
//
// A commit's store.RefWrites become one item each (keys.go: pk names the
// partition, child table, reference column and parent id; sk is "R" +
// child row id; no other attribute), put or deleted without conditions
// in the same transaction as the rows, or, for a commit too large for
// one transaction, written by the same fenced roll-forward. The writes
// are recorded in the log body (flag bit 2 after the changes), so a
// roll-forward replays them from the log; replays are idempotent.
// ListChildren is one consistent Query of the parent's pk after the
// usual roll-forward check.
//
// # Item sizes
//
//	head     ≈ 60 B + partition + logEpoch (kept far below 4 KB: 1 RCU)
//	log      ≈ 90 B + ids, + per change ≈ 12 B + rowId + scopes + row;
//	         split into chunk items of < 400 KB under the same seq
//	outcome  ≈ 40 B + clientId + clientCommitId + result
//	row      ≈ 20 B + partition + table + rowId + scopes + payload
//	         (over 400 KB: store.ErrTooLarge)
//	client   ≈ 50 B + partition + ids
//	ref      ≈ 10 B + partition + table + column + parent id + row id
//
// # Cost (benchmarks in bench_test.go, 200-byte rows)
//
//	operation                          trips  RCU  WCU
//	push, 1 op (Head+GetRows+Commit)       3    3    8
//	push, 50 ops                           3   52  126
//	quiet pull (TouchPartition)            1    1    0
//	incremental pull, 100 commits          1    8    0
//	bootstrap page, 1000 rows (ScanRows)   2   61    0
//
// RCU/WCU are computed from item sizes by the AWS rules (Usage.EstRCU,
// EstWCU); DynamoDB Local's reported capacity undercounts transactional
// writes. GetRows carries the head in its BatchGetItem, so the
// roll-forward check costs one RCU and no round trip.
//
// # Operator paths
//
// ListPartitions is the one Scan: it reads the whole table and serves
// syncular-admin only, never a request.
//
// # Retries and cost accounting
//
// The SDK retryer is disabled per call; RetryPolicy bounds the attempts
// of each call on throttling, transaction conflicts and 5xx, after which
// the error is sync.rate_limited (never a raw AWS error to the client).
// WithCapacity collects round trips and capacity per context.
package dynamostore
