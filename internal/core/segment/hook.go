package segment

import "github.com/skyfold/syncular-lambda/internal/core/wire"

// SEGMENT_INLINE payloads must be structurally valid rows segments at
// envelope decode (§5.7). wire cannot import this package, so it exposes a
// hook that importing segment fills in.
func init() { wire.ValidateRowsSegment = ValidateStructure }
