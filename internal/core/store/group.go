package store

import "context"

// GroupCommitter is an optional Store extension: group commit (issue 20
// item 7). A queued waiter whose turn is still ahead publishes the
// commit it evaluated, with its own authority, on its ticket; the holder
// of an earlier turn lands its own commit and the published commits of
// the tickets right after it as consecutive commitSeqs in one atomic
// write. Each member keeps every guarantee of a single commit: its
// outcome item is still conditioned on not existing (§2.3 exactly
// once), the rows it read are conditioned on being as read
// (CommitRequest.ReadRows), and its commitSeq is the next one (§2.1).
type GroupCommitter interface {
	// PublishCommit records req, the evaluated commit of the holder of
	// ticket (req.Ticket = ticket), for a holder of an earlier turn to
	// land. Publishing replaces an earlier publication of the ticket.
	PublishCommit(ctx context.Context, partition string, req *CommitRequest) error
	// PublishedCommits returns the published commits of tickets from,
	// from+1, … (at most n), stopping before the first ticket without
	// one.
	PublishedCommits(ctx context.Context, partition string, from int64, n int) ([]*CommitRequest, error)
	// CommitGroup lands reqs in order as one group: reqs[0] is the
	// holder's own commit and reqs[i] must follow it (ExpectedMaxSeq =
	// reqs[0].ExpectedMaxSeq+i and, on a queue, Ticket = reqs[0].Ticket+i).
	// It returns how many landed, always a prefix: a member that does
	// not fit the write (size, shared items), whose outcome exists or
	// whose rows changed since its evaluation is left out with every
	// member after it, and lands on its own later. Errors are those of
	// Commit for reqs[0], which lands alone or not at all.
	CommitGroup(ctx context.Context, partition string, reqs []*CommitRequest) (int, error)
}
