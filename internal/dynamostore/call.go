package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
)

// RetryPolicy bounds the retries of one DynamoDB call on throttling,
// transaction conflicts and 5xx. The SDK's own retryer is switched off
// for every call this package makes (see noSDKRetry), so MaxAttempts is
// the total number of requests one call can send.
type RetryPolicy struct {
	MaxAttempts int           // total attempts, ≥ 1 (default 10)
	BaseDelay   time.Duration // first backoff cap (default 10 ms)
	MaxDelay    time.Duration // backoff cap (default 1 s)
}

// DefaultRetryPolicy keeps the worst case of one call around 5 s, well
// inside the 30 s API Gateway integration timeout.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 10, BaseDelay: 10 * time.Millisecond, MaxDelay: time.Second}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultRetryPolicy.MaxAttempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = DefaultRetryPolicy.BaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultRetryPolicy.MaxDelay
	}
	return p
}

// backoff sleeps a full-jitter delay before attempt (1-based retries).
func (p RetryPolicy) backoff(ctx context.Context, attempt int) error {
	d := p.BaseDelay << min(attempt-1, 20)
	if d > p.MaxDelay || d <= 0 {
		d = p.MaxDelay
	}
	d = time.Duration(rand.Int64N(int64(d)) + 1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// NoSDKRetry is a per-call option that disables the SDK retryer: this
// package retries itself with RetryPolicy, so attempts do not multiply.
func NoSDKRetry(o *dynamodb.Options) { o.Retryer = aws.NopRetryer{} }

// Usage is a snapshot of the DynamoDB cost of a context.
type Usage struct {
	// RCU and WCU are the capacity DynamoDB reported (ReturnConsumedCapacity
	// TOTAL). DynamoDB Local reports them too, from its own size model.
	RCU, WCU float64
	// EstRCU and EstWCU are this package's estimate from item sizes per
	// the AWS rules (consistent reads: 4 KB units; writes: 1 KB units;
	// transactional writes count twice), for backends that report none.
	EstRCU, EstWCU float64
	// RoundTrips counts requests sent, retries included.
	RoundTrips int
}

// Capacity accumulates the DynamoDB cost of the calls made with a context
// returned by WithCapacity. Safe for concurrent use.
type Capacity struct {
	mu sync.Mutex
	Usage
}

// Snapshot returns the accumulated usage.
func (c *Capacity) Snapshot() Usage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Usage
}

type capKey struct{}

// WithCapacity returns a context that accumulates the DynamoDB cost of
// every call made with it (by this package and by s3segments), so the
// engine host can log a request's cost and benchmarks can report it.
func WithCapacity(ctx context.Context) (context.Context, *Capacity) {
	c := &Capacity{}
	return context.WithValue(ctx, capKey{}, c), c
}

// CapacityFrom returns the context's accumulator, or nil.
func CapacityFrom(ctx context.Context) *Capacity {
	c, _ := ctx.Value(capKey{}).(*Capacity)
	return c
}

// RecordRoundTrip counts one request.
func RecordRoundTrip(ctx context.Context) {
	if c := CapacityFrom(ctx); c != nil {
		c.mu.Lock()
		c.RoundTrips++
		c.mu.Unlock()
	}
}

// RecordConsumed adds DynamoDB-reported capacity. write says how to
// classify a total that DynamoDB did not split into read and write.
func RecordConsumed(ctx context.Context, write bool, cc ...types.ConsumedCapacity) {
	c := CapacityFrom(ctx)
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range cc {
		r, w := aws.ToFloat64(x.ReadCapacityUnits), aws.ToFloat64(x.WriteCapacityUnits)
		if r == 0 && w == 0 {
			if write {
				w = aws.ToFloat64(x.CapacityUnits)
			} else {
				r = aws.ToFloat64(x.CapacityUnits)
			}
		}
		c.RCU += r
		c.WCU += w
	}
}

// RecordEstimate adds estimated capacity units.
func RecordEstimate(ctx context.Context, rcu, wcu float64) {
	if c := CapacityFrom(ctx); c != nil {
		c.mu.Lock()
		c.EstRCU += rcu
		c.EstWCU += wcu
		c.mu.Unlock()
	}
}

// Capacity unit sizes (AWS rules).
const (
	readUnit  = 4096
	writeUnit = 1024
)

func units(size, unit int) float64 {
	if size <= 0 {
		return 1
	}
	return float64((size + unit - 1) / unit)
}

// readUnits estimates a strongly consistent read of items read one by
// one (GetItem, BatchGetItem): each rounds up separately, and a miss
// still costs one unit.
func readUnits(sizes ...int) float64 {
	t := 0.0
	for _, s := range sizes {
		t += units(s, readUnit)
	}
	return t
}

// queryUnits estimates a consistent Query page: sizes add up first.
func queryUnits(items []map[string]types.AttributeValue) float64 {
	n := 0
	for _, it := range items {
		n += ItemSize(it)
	}
	return units(n, readUnit)
}

// Error codes worth a retry: throttling, conflicts with concurrent
// transactions and server-side failures.
var retryCodes = map[string]bool{
	"ProvisionedThroughputExceededException": true,
	"ThrottlingException":                    true,
	"RequestLimitExceeded":                   true,
	"TransactionConflictException":           true,
	"TransactionInProgressException":         true,
	"InternalServerError":                    true,
	"ServiceUnavailable":                     true,
}

// cancellation reasons worth a retry when no condition failed.
var retryReasons = map[string]bool{
	"TransactionConflict":                    true,
	"ThrottlingError":                        true,
	"ProvisionedThroughputExceeded":          true,
	"RequestLimitExceeded":                   true,
	"InternalServerError":                    true,
	"TransactionConflictException":           true,
	"ProvisionedThroughputExceededException": true,
}

var sdkRetryables = retry.IsErrorRetryables(retry.DefaultRetryables)

// retryable reports whether err is transient. A cancelled transaction
// is transient only when no item failed for a reason that a retry cannot
// fix (a failed condition or a validation error).
func retryable(err error) bool {
	var tc *types.TransactionCanceledException
	if errors.As(err, &tc) {
		transient := false
		for _, r := range tc.CancellationReasons {
			code := aws.ToString(r.Code)
			switch {
			case code == "" || code == "None":
			case retryReasons[code]:
				transient = true
			default:
				return false
			}
		}
		return transient
	}
	var ae smithy.APIError
	if errors.As(err, &ae) && retryCodes[ae.ErrorCode()] {
		return true
	}
	return sdkRetryables.IsErrorRetryable(err) == aws.TrueTernary
}

// call runs fn with bounded, jittered retries on transient errors. After
// the last attempt the error becomes sync.rate_limited (retryable for the
// client); any other AWS error is wrapped with the operation name.
func call(ctx context.Context, p RetryPolicy, op string, fn func(ctx context.Context) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		RecordRoundTrip(ctx)
		err = fn(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retryable(err) {
			return err
		}
		if attempt >= p.MaxAttempts {
			return syncerr.Wrap(err, syncerr.RateLimited, "storage is busy (%s still throttled or conflicting after %d attempts)", op, attempt)
		}
		if berr := p.backoff(ctx, attempt); berr != nil {
			return berr
		}
	}
}

// wrap names the operation on a non-protocol error.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if syncerr.As(err) != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("dynamostore: %s: %w", op, err)
}

// Call runs fn with the policy's retries and wraps its error; exported for
// s3segments, which shares the table.
func Call(ctx context.Context, p RetryPolicy, op string, fn func(ctx context.Context) error) error {
	return wrap(op, call(ctx, p.withDefaults(), op, fn))
}

// Retryable reports whether err is a transient DynamoDB error.
func Retryable(err error) bool { return retryable(err) }
