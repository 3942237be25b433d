// Package s3errs classifies S3 errors for the packages that keep objects
// in S3 (s3segments, s3blobs), so both read a response the same way.
package s3errs

import (
	"errors"
	"net/http"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// IsStatus matches an S3 error by HTTP status or error code.
func IsStatus(err error, status int, code string) bool {
	if err == nil {
		return false
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == status {
		return true
	}
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == code
}

// Busy reports throttling or a 5xx (after the SDK's bounded retries):
// the callers map it to sync.rate_limited.
func Busy(err error) bool {
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) {
		return false
	}
	c := re.HTTPStatusCode()
	return c == http.StatusServiceUnavailable || c == http.StatusTooManyRequests || c >= 500
}
