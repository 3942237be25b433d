// Package dynamostore is the DynamoDB implementation of store.Store: one
// table (keys.go has the item layout) written with conditional
// transactions, so commits stay gapless and exactly-once across any
// number of Lambda instances (SPEC §2.1, §2.3, §6.4). Every read whose
// answer a write or a client relies on is strongly consistent, except a
// pull's log read, whose misses show and are read again consistently
// ("Read consistency" below); the table has no GSI.
//
// # Push: log first, roll forward
//
// The partition head item carries maxCommitSeq and appliedSeq (every
// commit ≤ appliedSeq has its rows materialized). A small commit (the
// usual one-operation push) is written without a transaction ("Small
// commits" below, fast.go); any other commit is one
// TransactWriteItems: head update conditioned on maxCommitSeq =
// appliedSeq = ExpectedMaxSeq, the outcome put-if-absent (§2.3), the log
// item(s) put-if-absent and, when everything fits one transaction
// (100 actions, 4 MB), the row writes, advancing appliedSeq with
// maxCommitSeq. A larger commit advances only maxCommitSeq; its rows are
// materialized afterwards in batches (at most 99 actions in a transaction,
// 400 plain writes, below), planned from the log body alone (so every
// instance cuts the same batches). Each
// batch ends with a head update conditioned on the fence "appliedSeq <
// seq" and on the progress recorded there (fs = seq, fb = batches
// written, fp = a print of the batch plan, so a build that cuts other
// batches starts over instead of skipping); it records one more batch,
// and the last batch advances appliedSeq itself. Any reader that depends
// on rows (GetRows, ScanRows, Commit, Prune) first finishes such a
// commit from the log, starting at the first batch not recorded: a
// materialization cut off by a crash or a request's deadline is not
// redone (at most the batch it was in), so a partition recovers within a
// few requests whatever the commit's size (TestRollForwardResumes: a
// 499-operation commit cut off after 2 of its 3 plain batches is finished
// by the first push of at most 4 write rounds, which writes only the
// 198 writes of the batch that was cut off; with 99-action batches it
// took 4 such pushes, and before progress was recorded every request
// restarted at the first batch and none finished). Concurrent rollers
// take the batches in turn: the loser of one reads the head and goes on
// from there.
//
// Plain batches (issue 23). A batch whose actions are all Puts of items
// carrying their commit seq (rows, tombstones, scope copies and their
// tombstones: every commit without reference-index writes) is written
// outside any transaction, one PutItem per action (16 in flight) at
// 1 WCU per KB instead of 2, then recorded by the head update alone
// (writeBatchPlain). No transaction caps such a batch at 100 actions, so
// a plain batch holds up to 400 writes (plainBatchActions): its head
// update is only a resumption point, and a roller cut off inside a batch
// writes at most that batch again. Each Put is conditioned
// "attribute_not_exists(pk) OR cs <= seq". Why that is as safe as the
// transaction was:
//
//   - Visibility does not change: readers still see the commit's rows
//     only through appliedSeq, which only the last batch's head update
//     moves, after every batch's writes returned; until then every reader
//     that depends on rows rolls the commit forward first (§2.1: a commit
//     becomes visible whole).
//   - Replays are idempotent: writing an item again with the same seq
//     stores the same item.
//   - A stale roller (one still writing after another instance finished
//     the commit and later commits changed its rows) can no longer record
//     progress (the fence), and its writes cannot lower an item: a later
//     commit's write or delete left a higher cs there, deletes included,
//     because a deleted row and a deleted scope copy are tombstones
//     carrying the deleting commit's cs (not absent items), so the
//     condition fails and the item stays. The one absent item a stale
//     write could fill is a tombstone Prune already deleted; Prune only
//     reaches commits older than the partition's retention, far beyond
//     any request's deadline, which bounds how late a roller's write can
//     arrive.
//   - Reference-index entries carry no seq (a stale put could bring an
//     entry back, a stale delete remove one), so a commit with reference
//     writes keeps the fenced transactions, whose head condition stops a
//     stale roller before any write.
//
// A 50-operation insert's materialization (50 rows and 50 scope copies)
// was two transactions at 2 WCU per item and is now 100 PutItems and one
// head update: 216 → 107 WCU for the push with the compressed log item
// below (TestEngineCostV3OverDynamoDB; 109 in make cost, whose rows are
// larger), 104 calls instead of 5 (the plain writes in waves of 16).
//
// Compressed log bodies (issue 23, logzstd.go). A log body of 512 bytes
// or more is stored zstd-compressed (format 3) when that is smaller, so
// a large commit's log item, charged twice in the commit transaction,
// shrinks with it: make cost's 50-row insert (32-character titles that
// do not repeat) 4,560 → 1,119 bytes, 10 → 4 WCU; bodies of random rows
// gain little (50 random 60-byte rows 1.38×, 50 random 1 KB rows 1.02×)
// and a body compression does not shrink is stored as it was. Formats 1
// and 2 still decode; smaller bodies (every 1-op commit) stay format 2.
// Format 3 is written only once the table's store-format level allows it
// (below): until a deploy's post-traffic hook ran, large bodies stay
// format 2 (make cost's 50-op round 115 instead of 109 WCU).
//
// # Stored formats: read first, write later (formats.go)
//
// A build may write a stored format only once every build that can still
// serve reads it (issue 20 item 1: during a canary the old build takes
// most requests, and a commit it cannot decode would fail its pulls and
// roll-forward as corrupt, trip the rollback alarm, and stay unreadable
// after the rollback). storedFormats is the one table "format → level"
// (level 1: log body format 3); FormatLevel, its highest level, is what
// this build reads. The schema marker item carries the table's level in
// attribute fl, raised only upward by a conditional update
// (RaiseFormatLevel) from migrate.Step, which only the post-traffic hook
// and syncular-admin migrate run, after every request is on the new
// build, and no higher than every live realtime tier instance reads
// (tierlevel.go: the tier rolls out on its own); a request never raises
// it. A Store writes a gated format when
// the level it last saw is at or above that format's level, and reads
// every format up to FormatLevel whatever the level. The level reaches
// writers with the marker's cached copy (markerCache: the same item in
// the BatchGetItem a request makes anyway, once per MarkerTTL), so no
// item is read by every request; a copy that lags only delays the new
// format, since a writer with a lower level writes the older format every
// build reads. After the level rose, a rollback to a build below it is
// not supported (the hook of such a build reports Failed, as for a newer
// schema marker; a build from before the level cannot check): roll
// forward. A new stored format appends its entry to storedFormats and
// gates its writes with mayWrite. TestFormatLevelReadFirstWriteLater
// (an older build beside the new one on one table) and
// TestDeployKeepsServing (functions) check it.
//
// Small commits (issue 23, fast.go; the default, off with
// Options.TransactionalCommits or SYNC_SMALL_COMMITS=off). A commit whose
// log is one item, without reference writes, a backfill checkpoint, a
// fence raise or a queue ticket, in a partition whose log index is off,
// whose head stays under 1 KB with the commit on it, takes no
// transaction: a consistent BatchGetItem of the head, its outcome key,
// the previous commit's log item and the rows it read; one conditional
// UpdateItem of the head that moves maxCommitSeq, carries the log and
// outcome items (the commit point) and marks the previous small commit
// applied (appliedSeq) once that read found its log item; then the
// outcome, row and (once the partition has them on) scope-copy puts in
// parallel; then the log item, last.
// Nothing else moves appliedSeq: a log item proves its commit written
// whole, and the next commit's head update records it. Until then the
// head shows the commit pending (ps = maxCommitSeq = appliedSeq + 1),
// and readers take its writes from the head (GetRows and the push's
// head and rows read overlay them, no extra read) or read its log item
// once (ScanRows, ScanScopedRows, ListChildren) and write it whole only
// when that is absent (a crashed or slow writer); Prune, PutRejection,
// backfills and the transactional commit also move appliedSeq. A 1-op
// insert is 4 WCU (head, outcome, row, log: 1 each; 8 in the
// transaction) for 5 DynamoDB calls in 4 waves after the head and rows
// read (1 in the transaction) and 3 more RCU (its outcome key, the
// previous commit's log item, the row): the commit follows the head that
// read returned, which the Store remembers for 2 s (headmemo.go), and
// reads the head again (+1 call) only without it. 5 WCU and 6 calls
// (10 in the transaction) with the partition's scope copies on, or for
// a delete, which writes its copy tombstone whatever the state
// ("Scope-keyed reads" below). fast.go proves gapless
// seqs, exactly-once outcomes, atomic visibility and the writer fence
// for this order, and what a stale writer can and cannot do. Queued
// commits (contention, below) keep the transaction: the queue's turn is
// then held for one write wave, not four, and a group commit stays one
// transaction; a queued commit after a small one first moves appliedSeq
// past it (one log read and one head update).

// # Column versions and tombstones (§2.2, §4.6 of the wire-3 spec)
//
// Both live on the row item, so they add no item, no action and no round
// trip to a push:
//
//   - Column versions are the binary attribute cv: the column count, then
//     runs of (length, version − column version) as varints (encodeCV).
//     A full-row write (every insert, every version-2 upsert) is 3 bytes;
//     a row after sparse updates a few more. Absent means nil (every
//     column at the row's version), which is how rows written before
//     column versions existed read.
//   - A delete Puts a tombstone in place of the row: the key, cs (the
//     deleting commit), dl = true and the deleted row's scopes (sc), so
//     a later upsert is authorized against them (§3.4). Recreating the row
//     overwrites it like any upsert. GetRows returns it (Deleted), ScanRows
//     reads and skips it.
//   - The log body (format 2) carries each change's encoded column
//     versions (1 byte when none), so a large commit's roll-forward writes
//     the same column versions and tombstones as an inline one; the
//     appliedSeq fence and each write's cs condition keep replays
//     idempotent. Format-1 bodies, from
//     before, still decode (rows with nil column versions).
//   - Prune never scans the row table: for each commit at or below the
//     new horizon it reads the commit's log items (which it deletes
//     anyway), deletes that commit's tombstones (rows and scope copies)
//     with a conditional DeleteItem (dl = true AND cs ≤ horizon, so a
//     recreated or re-deleted row stays; 8 in flight), and only then the
//     log items: an interrupted
//     prune leaves no tombstone behind a deleted log item.
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
// ListChildren takes every parent of one cascade level at once: one
// roll-forward check (head read) for the call, then one consistent Query
// per parent's pk, 8 in flight. Deleting a parent with 1,000 CASCADE
// children that are themselves parents (TestCascadeAtTheCapOverDynamoDB)
// costs 1,042 round trips, ≈ 2,011 RCU and ≈ 4,161 WCU: 1,001 index
// Queries, 2 head checks, batched row reads and the log-first commit
// (2,043 round trips and ≈ 3,012 RCU with one head read per parent).
//
// # Scope-keyed reads (issue 11)
//
// In a partition with scope copies on, every live row of a scoped table
// also lives once per stored scope under a pk of its (table, variable,
// value) (scopeindex.go), written with the row item, in its transaction
// or its roll-forward (scope values are immutable after insert, §3.4, so
// a copy never moves); a delete leaves a tombstone there too, skipped by
// reads and removed by Prune (issue 23: the plain roll-forward relies on
// it). A bootstrap page Queries only the pks of the requested values
// (ScanScopedRows), so a 1% scope of a table costs about 1% of the
// table's read units; the row item, keyed by rowId, stays what a push
// reads (GetRows), so a push still reads head and rows in one
// BatchGetItem. The copy costs one more item per scope variable on every
// row write (a 1-op insert 5 WCU, 10 in the transaction), and a commit
// inlines at most about 48 one-variable rows (each row is two actions of
// the transaction's 100) before it takes the log-then-materialize path.
//
// Copies are adaptive (issue 23; scopeindex.go has the argument): a new
// partition writes none (a 1-op insert is 4 WCU, and about 97
// one-variable rows inline), and ScanScopedRows reads its row items, as
// for partitions created before the index. In a partition whose rows all
// carry the value its clients pull that read returns exactly the visible
// rows. When one read takes at least 256 row items of which fewer than
// 1 in 8 match, it sets hScopeOn on the head (one conditional
// UpdateItem, once per partition); every later commit writes its copies
// (a commit without them is conditioned on the flag's absence and
// written again with them when refused), and the next scheduled prune
// run backfills the rows written before (BackfillScopeIndex, resumable
// and safe under traffic; app.Pruner, from the head Prune reads anyway)
// and sets hScoped, after which bootstraps read the copies. Deletes write
// their copy tombstones in every state, so a copy left by an older build
// (rolling deploy: it writes copies always and reads them only with
// hScoped) never outlives its row; Prune deletes them as before.
// Options.ScopeCopiesNewPartitions creates partitions with copies on and
// marked. Partitions created before the index read the row items per
// value until the trigger or syncular-admin backfill-scopes (which sets
// hScopeOn first) backfills them.
//
// # Log scope index (§3.1; issues 11 and 23)
//
// A commit of a partition whose log index is on also writes, in its log
// transaction, one key-only entry per (table, scope variable, value) it
// touches (a single "*" entry per table past 16 of them), so an
// incremental pull of a long window reads the entries of its values and
// then only those commits (logindex.go): +2 WCU on a 1-op push. Prune
// deletes the entries with their commit. The index is adaptive (issue
// 23): a new partition starts without it, so its 1-op push is 10 WCU, not
// 12; the first scoped pull that reads a window of at least 64 commits
// from the log and finds fewer than 1 in 8 of them touching its values
// turns it on for every later commit (one UpdateItem of the head, once
// per partition; Options.IndexNewPartitions starts it on). Partitions
// written before keep theirs (their head has hLogIndexFrom). A commit
// written without entries is conditioned on the head's index being off,
// so none lands after the index started (logindex.go has the argument).
//
// # Outcome expiry (issue 20)
//
// A push outcome answers its idempotency key for Options.OutcomeTTL
// (SYNC_OUTCOME_TTL, 30 days by default) after its RecordedAtMs. The item
// carries the table's TTL attribute, the second that window ends, written
// in the same Put (outcomettl.go: outcomeTTL is the one place it is
// computed, outcomeItem the one place it is set), so expiry costs no
// write and DynamoDB's deletion no write unit. Because TTL deletes
// lazily, the store judges expiry itself, by the engine's clock: GetOutcome
// takes nowMs, and the outcome put of Commit and PutRejection is
// conditioned on "absent or expired by the new outcome's RecordedAtMs"
// (outcomeAbsent). A retry after the window is therefore a new commit
// under the §6.2 rules (docs/OPERATIONS.md, "Idempotency window").
//
// Log, log-index and tombstone items get no TTL: §4.6 keeps the newest
// 1,000 commits and the commits of active cursors however old, so an
// expiry set at write time would delete commits a floor protects, and one
// set when the horizon moves costs the write a delete costs. Prune deletes
// them (1 WCU each) with the registry's shards walked in parallel
// (internal/app Pruner, ListRegistryShard).
//
// # Item sizes
//
//	head       ≈ 60 B + partition + logEpoch (kept far below 4 KB: 1 RCU)
//	log        ≈ 90 B + ids, + per change ≈ 13 B + rowId + scopes + row
//	           + column versions (4 B for a full-row write); a body of
//	           512 B or more zstd-compressed when smaller (logzstd.go);
//	           split into chunk items of < 400 KB under the same seq
//	outcome    ≈ 45 B + clientId + clientCommitId + result (ttl included)
//	row        ≈ 20 B + partition + table + rowId + scopes + payload
//	           + column versions (5 B for a full-row write)
//	           (over 400 KB: store.ErrTooLarge)
//	scope copy the row's size + variable + value (one per scope variable)
//	log index  ≈ 30 B + partition + table + variable + value
//	tombstone  ≈ 17 B + partition + table + rowId + scopes
//	client     ≈ 50 B + partition + ids
//	ref        ≈ 10 B + partition + table + column + parent id + row id
//
// # Cost
//
// Benchmarks in bench_test.go (200-byte rows, 8 column versions after a
// sparse update: 5 bytes encoded); TestEngineCostOverDynamoDB checks the
// engine's push, delete and pull on the same counts.
//
//	operation                          trips  RCU  WCU
//	push, 1 op (head+rows read, Commit)    6    5    4   (TouchPartitionRows, a small commit;
//	                                                      in the transaction 2 / 2 / 8; +1
//	                                                      call and 1 WCU (2) with scope copies
//	                                                      on, 2 more WCU with the log index)
//	push, 50 ops (a small commit)         56   53   55   (make cost's round, scope copies off:
//	                                                      head update carrying the 1.1 KB
//	                                                      log (2), 51 plain puts, log (2);
//	                                                      108 WCU in one transaction)
//	push, 50 ops, copies on (large)      104   52  107   (log transaction of 6, 100 plain
//	                                                      Puts, 1 progress update; was
//	                                                      105 / 114 with 99-write batches
//	                                                      and a plain log body, 5 / 216
//	                                                      with transactional batches)
//	push, 1 delete (tombstone Put)         7    5    5   (and its copy tombstone; in the
//	                                                      transaction 2 / 2 / 10)
//	quiet pull (TouchPartition)            1    1    0   (head; + marker once per 5 s)
//	incremental pull, 100 commits          1    4    0   (store read: the log, eventually
//	                                                      consistent; 8 consistent)
//	incremental pull, 1 of 1,001 commits   6    8    0   (engine, scope index and
//	                                                       serve-gate re-read; make load-dynamodb)
//	bootstrap page, 1000 rows of a scope   2   61    0   (whatever the table's size, once
//	                                                      the partition's copies are on)
//	                                                     (each Query sized to the page and its
//	                                                      lookahead row: 1.12× the rows' units)
//	prune, per pruned commit               -  log  log + 1 per tombstone
//
// A push round (push and pull in one request) writes no client record
// when the client's record is younger than the engine's
// CursorRecordInterval (5 min) and only its cursor moved up
// (engine/clients.go has why a lagging cursor only holds the §4.6
// horizon lower): 1 WCU less on every such round. Nor does its pull read
// anything when its cursor is the head the push built on: the engine
// serves the round's own commit as committed (no log Query) and skips
// the serve gate's re-read the commit's condition already covered, so
// a 1-op round costs its push's 7 calls, 6 RCU and 5 WCU (9 and 7.5
// before: + 0.5 RCU of Query, + 1 RCU of gate BatchGetItem).
//
// Column versions cost nothing on a 1-op push (the items stay in the
// same 1 KB unit); on the 50-op push they cost 2 WCU while its log body
// was stored plain (6 B per change took the log item across one 1 KB
// boundary, ×2 in the transaction). A tombstone costs what the delete it replaces cost: a
// Put of a small item is charged the larger of the old and new item,
// like a Delete is charged the deleted item. Until pruned, each tombstone
// adds its ≈ 40 B to the bootstrap scans of its table (a 4 KB read unit
// per hundred or so); a push reading its id pays 1 RCU, as for an
// absent row. Prune pays one
// DeleteItem round trip and 1 WCU per tombstone.
//
// RCU/WCU are computed from item sizes by the AWS rules (Usage.EstRCU,
// EstWCU); DynamoDB Local's reported capacity undercounts transactional
// writes. GetRows carries the head in its BatchGetItem, so the
// roll-forward check costs one RCU and no round trip. A push's first
// commit reads its rows (at most 32, of one table) in TouchPartition's
// BatchGetItem with the head (and the schema marker when due), so a 1-op push is
// that read and the commit transaction (it was 3 round trips and 4 RCU
// with a separate GetRows), or that read and a small commit's 6 calls; a
// small commit pending on the head does not cost the rows a second read
// (its writes come from the head).
//
// # Contention on one partition: the commit queue (issue 11)
//
// Every commit of a partition is conditioned on its head (§2.1 gapless
// commitSeq), so commits of one partition are serial whatever the number
// of writers. Racing for the head optimistically wastes most attempts as
// writers are added; a writer therefore lines up instead (queue.go and
// the engine's queue.go) once it lost a race, or at once when the head
// shows the queue in use (its turn moved in the last 500 ms). An engine
// (a Lambda instance) that itself saw a partition's turn move in the
// last 500 ms takes its ticket before the request's first read, sleeps
// until its estimated turn and lets that BatchGetItem (head, marker,
// rows) be the read in its turn: ticket, read, commit. It remembers the
// last turn, its time and the learned gap of at most 1,024 partitions;
// an early ticket the request never uses (it failed first) waits for its
// turn, at most a lease, and is passed:
//
//   - Tickets come from their own item (pk of the head, sk QUEUE): one
//     UpdateItem ADD tk 1, 1 WCU, no condition. A single-item write on
//     the head would fail with a transaction conflict whenever a commit
//     transaction holds it, which under contention is nearly always.
//   - The turn is a head attribute (tn; tt when it moved, tg the learned
//     time per turn). A queued commit's head condition also requires
//     tn = ticket−1 and its head update sets tn = ticket: no extra
//     action, read or unit. The rest of the commit is unchanged, so no
//     correctness property rests on the queue; commits outside it still
//     land and only make the holder read again.
//   - A waiter sleeps until the turns ahead of it should have passed,
//     then reads head and rows in one BatchGetItem. A holder whose
//     evaluation ends in a rejection, a replay or an error passes its
//     turn (SET tn = ticket IF tn = ticket−1). A turn that has not moved
//     for 2 s has its holder skipped (SET tn = to IF tn = the turn
//     seen); a skipped holder's commit fails its turn condition and it
//     lines up again. A waiter that sees the turn stand still for 1 s
//     marks itself waiting (SET w<ticket> = the turn on the ticket item,
//     1 WCU, only while stalled); the waiter whose 2 s run out reads
//     those marks (one consistent GetItem) and sets `to` just before the
//     lowest ticket marked at that turn (or its own): a run of dead tickets
//     (holders that crashed or whose request ended before their turn)
//     costs one lease in total, not one each. Unmarked tickets further
//     back, between live ones, go on the head with that update (df/dm:
//     a first ticket and a 63-bit mask), and a waiter that reads the
//     turn just before one skips it at once, without a lease. Marks of
//     passed tickets are removed with that read. A waiter reads again
//     at least every 250 ms.
//
// The head and the rows of one BatchGetItem are not one snapshot: a row
// may predate the head's last commit. A commit built on such a head names
// the rows as read (store.CommitRequest.ReadRows) and requires each to be
// unchanged (same cs, or still absent): on the row's own Put when the
// commit writes it inline, which costs nothing, otherwise by a
// ConditionCheck (in the log transaction of a large commit). Everything
// else an evaluation reads (references, blobs) is read after the head, so
// the head condition covers it as before.
//
// Measured with make load-dynamodb (TestLoad/writers, 3 s per step, 1-op
// inserts of distinct rows into one partition, every writer its own
// client and its own engine, as separate Lambda instances) on DynamoDB
// Local, on a shared 2-core machine at load average 4–7, interleaved:
// the queue reading first, then taking its ticket (four runs), and
// ticket first (four runs):
//
//	writers   read first: commits/s   trips/commit   ticket first: commits/s   trips/commit
//	   1       123 / 114 / 100 / 138      2.00        127 / 112 /  97 / 118       2.00
//	   2       126 / 146 /  93 / 143      3.74–3.88   156 / 156 / 111 / 147       3.21–3.24
//	   4       106 / 154 / 130 / 133      4.65–4.77   125 / 150 / 124 / 106       3.45–3.49
//	   8       106 / 134 / 120 / 129      5.00–5.29   141 / 143 / 135 / 104       3.94–4.02
//	  16        95 / 101 / 117 / 106      5.44–5.63   146 / 122 / 124 / 113       4.39–4.49
//	  32        72 /  98 / 110 / 104      5.77–6.09   136 /  87 /  85 / 108       4.85–5.14
//
// Eight writers commit at 88–140% of one writer's rate in the same run
// (87–120% reading first). Before the queue, backoff alone gave 8 writers
// 69–75% of one writer at 8.4–9.0 round trips, 32 writers about 26 round
// trips at a quarter of the rate. A queued commit costs at least 3 round
// trips (ticket, the read in its turn, commit), 4 when its instance had
// not seen the queue yet (the first read finds it); the rest are reads
// that came before the turn did (the estimate of when it comes is a few
// turns off when many wait). An instance whose last two turns were its
// own, with no other turn between them, races the head again (2 round
// trips), so a lone writer that once met contention does not keep paying
// the queue. Rates on DynamoDB Local swing by ±40% with the machine's
// load; the round trips are exact. Measured again with the dead-ticket
// skips (3 runs, load 5–7): 8 writers 3.90–4.08 and 32 writers
// 4.73–5.24 round trips per commit, as before them (they run only when a
// turn stalls).
//
// Ceiling: a partition commits one commit per turn, a consistent read
// plus a commit transaction plus the hand-off, whatever the number of
// writers; past that rate more writers only wait longer (each bounded by
// its request's deadline, and by 1,000 reads for its turn, after which it
// answers sync.rate_limited). On DynamoDB, with transactional writes of
// some 10–20 ms, expect a few tens of commits per second per partition;
// data that needs more belongs in more partitions (the sync partition is
// the unit of ordering, §2.1).
//
// # Group commit: several commits per turn (group.go, issue 20)
//
// A turn can land more than one commit. A waiter not in its turn
// publishes the commit it evaluated on its ticket (one PutItem, pk
// P#<partition>#G, sk the ticket, the request gob-encoded, TTL one
// hour); the holder of the turn reads the publications after its ticket
// (one consistent Query, issued beside its own read so its turn gains no
// round trip) and lands its commit and theirs in one TransactWriteItems:
// one head update (mx and ap to the last seq, tn to the last ticket),
// then each member's items from prepare and commitParts (commit.go, the
// functions that build a lone transactional commit's items, scope-copy
// tombstones included) at consecutive seqs, every one inline, within
// 100 actions / 4 MB. The adaptive log index applies to the group as a
// whole: every member writes its entries when the holder's instance
// knows the index is on (the head update then starts hLogIndexFrom at
// the first member's seq if unset), else none does and the head update
// carries the index-off condition; a group refused by that condition is
// written again with the entries, as a lone commit is (errIndexOn). A
// group is one transaction, never the small-commit path (fast.go). A
// member is left out, with the members after it, when it does not fit,
// touches an item an earlier member touches (a row both write or read),
// carries another writer version or gate token, raises the writer fence
// (RaiseFence: it lands alone, through Commit), or cancels the
// transaction by its own condition (its outcome exists: exactly once,
// §2.3; a row it read changed): the transaction is retried without it,
// and it lands in its own turn. The waiter finds the turn past its
// ticket and reads its outcome (one GetItem) to answer. The engine
// publishes only evaluations that depend on nothing but the rows read
// with the head (no validators, references, blob checks or reactions)
// and never evaluates a member itself, so a member has exactly its own
// request's authority (TestGroupCommit, TestGroupCommitLogIndex). The
// push request line counts it (grouped, carried, leftOut;
// TestGroupCommitMetrics). With 8 ms added to every request, a real
// table's round trip, 32 writers land 4.2–7.1 commits per head
// transaction and 1.4–5 times the commits per second of the same
// writers alone in 11 of 12 runs (TestGroupCommitCeiling,
// docs/SCALE.md).
//
// # Rolling schema upgrades (schema.go)
//
// The serve gate costs no round trip and reads no item shared by
// partitions (issue 20, TestNoGlobalHotItem): the writer fence, pending
// checkpoints and gate token are head attributes, read consistently with
// the head on every request and checked by the commit's existing head
// condition, and a response is re-checked (one more BatchGetItem of the
// head) only when it carries commits, segments or conflict rows, and not
// for a push round whose pull reaches no further than its own commit
// (engine gate.go, gateNeedsRecheck). The
// schema marker (SYS/SCHEMA) is cached per Store: one request per
// Options.MarkerTTL (default 5 s) adds the marker key to the
// BatchGetItem it makes anyway (+1 RCU, no round trip), so the item sees
// about (instances ÷ 5) reads/s instead of every request of every tenant
// (which capped the service at one item's ≈ 3,000 consistent reads/s).
// Creating a partition still reads the marker from the table (once per
// partition) and pins it with a ConditionCheck in the creating
// transaction. Why a stale copy is safe: the marker refuses nothing by
// itself (issue 20: deploys keep serving); what stops a build is its
// partition's fence (rwv), read with the head and checked by the
// commit's own condition. The fence rises lazily, per partition: a
// commit of a newer build that writes a table layout an older build
// cannot read sets rwv (and moves gt) in its own head update
// (store.CommitRequest.RaiseFence, one more SET in an update the commit
// makes anyway: no action, read or unit), and a checkpoint declaration
// raises it in its transaction, together with the schema marker when the
// Store's copy of the marker is below the declared version (so no
// declaration is ever visible without the marker at its version; the
// migration step bumps the marker first, so its declarations add no
// action on the shared item). A release declares its checkpoints once,
// table-wide (DeclareCheckpoints: a consistent read and one conditional
// update of the marker item that sets the marker, the declaration and
// its generation together; 2 round trips whatever the number of
// partitions). The Store's marker copy carries the declaration, and a
// head whose ckd is below its generation gets the declared checkpoints
// added to its gate's pending set (store.Gate.Unmaterialized: gated as
// declared, with the marker copy's bounded age). MaterializeCheckpoints
// makes them the partition's own in one transaction (checkpoint Puts,
// ConditionChecks pinning existing ones, the head's rwv, pcs, gt and
// ckd); the new build's first write in the partition and the backfill
// walk call it. A partition created after a declaration starts with ckd
// at its generation (pinned with the marker's ConditionCheck): it has
// nothing to backfill. An instance whose copy predates a declaration
// serves and writes an unmaterialised partition as it did just before
// the declaration, for at most one MarkerTTL: harmless, since a
// partition's backfill starts only after it materialised (its scan sees
// every earlier commit) and the declaring build serves either way. A
// checkpoint activates in one
// transaction with the head's pending-set removal conditioned on the
// head still at the watermark the runner caught up to (AdvanceCheckpoint
// with Activate: the head condition keeps it correct). A runner whose
// first try lost to a commit takes the partition's commit-queue turn
// (engine.WaitTurn, a ticket like a queued commit's) and holds it until
// it activated: queued commits wait behind it rather than landing
// between its check and its write.
//
// The build registry (builds.go, BLD#<function>/S<schema>) names, per
// function and schema version, the function version serving it. Each
// published version of a sync function writes its item once per cold
// start (a conditional put, nothing when it is there already); only a
// build its gate refused reads it (one Query of at most one item, cached
// 5 s per instance, app.Forwarder), to forward the request to the newest
// version past the fence. No request of a partition that is not fenced
// touches it.
//
// # Operator paths
//
// Operator jobs enumerate partitions from the partition registry
// (partitions.go): items under RegistryShards keys REG#00..REG#15, one per
// partition, written by TouchPartition only when it creates the head (a
// put before the head's, so creating a partition costs one more round
// trip and ~1 WCU once; a request to an existing partition writes
// nothing more). ListRegisteredPartitions Queries them, resumable from a
// cursor; syncular-admin -all and the backfill walk (the post-traffic
// hook and syncular-admin migrate -backfill, through
// EachRegisteredPartition, so both materialise and backfill the same
// set; the declaration itself lists nothing) use it. Scheduled pruning walks the 16
// shards in parallel with ListRegistryShard, one resumable cursor per
// shard.
// ListPartitions is the one Scan: it reads the whole table and serves
// only syncular-admin register-partitions, the one-off backfill of
// partitions created before the registry existed.
//
// # Retries and cost accounting
//
// The SDK retryer is disabled per call; RetryPolicy bounds the attempts
// of each call on throttling, transaction conflicts and 5xx, after which
// the error is sync.rate_limited (never a raw AWS error to the client).
// WithCapacity collects round trips and capacity per context.
//
// # Read consistency
//
// An eventually consistent read costs half (0.5 RRU per 4 KB) but may
// miss any write of the last second or so. Two reads are eventually
// consistent, because a miss there shows and is read again (issue 23):
//
//   - A pull's commit log (ReadLog, and the part of ReadLogScoped read
//     from the log; readLogCheap in read.go): a log item never changes
//     once written (put-if-absent, every chunk in one write), so a stale
//     answer can only lack items, and commit seqs are gapless above the
//     horizon, so the first seq that does not follow the last one handed
//     on ends the cheap read and the rest of the window is read
//     consistently (and if even that ends early, the head is read for a
//     small commit not materialized yet, fast.go).
//   - ReadLogScoped's later batches of listed log items (after the one
//     that carries the head; indexedBatches.fetch): a key missing from
//     the answer is read again consistently before it counts as pruned.
//
// Every other read is strongly consistent (getItem, query and batchGet
// in ops.go set ConsistentRead unless told otherwise); each read below
// is consistent because a stale answer there is not harmless.
//
//   - Partition head: readHead (store.go; Head for pulls, TouchPartition
//     for pushes) and the push path's batched head read (schema.go,
//     "read partition head"). The head is maxSeq, the log epoch and the
//     writer fence. A pull serves cursor < commitSeq <= maxSeq and takes a
//     cursor past maxSeq for one it does not know, answering a bootstrap
//     (§4.7, engine/pull.go): a client that has just seen commitSeq N from
//     an up-to-date replica would be re-bootstrapped by a stale one. A
//     stale epoch would answer a reset (§2.1) to a client the rotation
//     already re-bound; a stale fence lets a push through its check only
//     to lose the transaction's condition. This is the one read of a
//     quiet pull (1 RRU, $0.125 per million; half that if eventual):
//     making it eventual needs the engine to answer a cursor past a
//     stale maxSeq as "nothing new yet", which today it must not, since
//     such a cursor may really come from an earlier epoch.
//   - Rows by key in the push path (schema.go, the same BatchGetItem as
//     the head): their versions are the base of §2.2 optimistic
//     concurrency; a stale version would reject a valid commit as a
//     conflict.
//   - A small commit's first read, "read before a small commit"
//     (fast.go): the outcome key is the §2.3 check the transaction's
//     put-if-absent makes otherwise (a stale miss applies a replay
//     twice); the rows are the check that they are as the evaluation read
//     them (a stale answer lets a commit land on a version it did not
//     see); the previous commit's log item is what lets the head update
//     mark that commit applied. The log item alone could be eventually
//     consistent (a log item found exists), but one BatchGetItem has one
//     consistency, and a second call to save half a unit is not worth it.
//     "read log before a small commit" and "read push outcome" there are
//     its re-reads when the first answer lacked them. The head is not in
//     that read: the commit follows the head of the Store's last
//     consistent look at it, up to 2 s old, and "read head before a
//     small commit" reads it only when there is none. That head may be
//     stale, harmlessly: what the read must follow is some completed
//     consistent look showing maxSeq = the commit's expected seq, and
//     whatever else of it is stale the commit point's condition checks
//     again (fast.go, "The head wave 1 follows").
//   - A pending small commit's log item, "read pending commit's log"
//     (settleSmall): a stale miss would only make the reader write the
//     commit again (idempotent, but 5 write units), so it is consistent.
//   - Outcomes: GetOutcome (store.go) is the §2.3 idempotency record; a
//     stale miss would apply a replayed commit twice.
//   - Client records: GetClient and the "list client records" Queries of
//     RotateEpoch and ListClients (store.go). The record binds a client
//     to an epoch and holds its acknowledged cursor; the pruning horizon
//     is the least of them, so a stale cursor could prune a commit a
//     client still needs, and a stale binding answers a needless reset.
//   - The commit log's reads other than the two above: roll-forward's
//     read of the commit it finishes, "read pruned log items" (read.go),
//     the log index Query "read log index" (an entry missed would skip a
//     commit for good, and the entries of one value are not contiguous
//     seqs, so nothing shows the miss) and the first batch of "read
//     indexed commits" (it carries the head). A pull reads the log up to
//     the maxSeq it read from the head; an item the read missed would be
//     skipped for good by the cursor it returns (§4.5 gapless delivery).
//   - Rows for a bootstrap: "read rows", "scan rows" (read.go) and "scan
//     scoped rows" (scopeindex.go): a page is the snapshot as of its
//     commitSeq (§5.2); a missed row is lost to that client, whose cursor
//     then starts after it.
//   - The §6.11 reference index, listChildren (refs.go): a cascade or a
//     restrict check that misses a child just written leaves an orphan
//     or deletes a referenced parent.
//   - Commit tickets, WaitingTickets (queue.go): the queue's leases; a
//     stale list skips or waits on the wrong ticket.
//   - Schema marker and checkpoints: SchemaMarker and the per-partition
//     checkpoint (schema.go), and the backfill's row reads (backfill.go):
//     a migration step that reads a stale marker or checkpoint may fence
//     too little or redo a step (markerCache in schema.go bounds the one
//     place a cached marker is used).
//   - Operator paths: the partition registry Query (partitions.go),
//     JobCursor (the job's saved cursor) and ListPartitions' Scan. A
//     migration must fence every partition, including one created a
//     moment ago; a stale job cursor redoes or skips a stretch.
//   - "read commit times" (read.go), the prune job's read of the
//     commits past the horizon, could be eventual (a stale answer only
//     prunes less this run) and is kept consistent: it runs on a
//     schedule, not per request, and costs a few units a run.
//
// Outside this package the same rule holds: the grant read of table
// scopes mode (auth/resolvers.go) is consistent so a deleted grant
// revokes on the next pull; the segment publication and object reads
// (s3segments) are consistent so a page is never rebuilt or served from
// a record a concurrent build already replaced; the realtime instance
// registry (rtfanout) is consistent so a new instance receives fanout at
// once.
package dynamostore
