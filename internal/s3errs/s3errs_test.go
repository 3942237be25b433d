package s3errs

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

func respErr(status int) error {
	return &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
		Err:      errors.New("s3 said no"),
	}
}

func TestIsStatus(t *testing.T) {
	if !IsStatus(fmt.Errorf("get: %w", respErr(http.StatusNotFound)), http.StatusNotFound, "NoSuchKey") {
		t.Error("a wrapped 404 response is not matched by status")
	}
	if !IsStatus(&smithy.GenericAPIError{Code: "NoSuchKey"}, http.StatusNotFound, "NoSuchKey") {
		t.Error("an API error without a response is not matched by its code")
	}
	if IsStatus(respErr(http.StatusPreconditionFailed), http.StatusNotFound, "NoSuchKey") {
		t.Error("a 412 matched as 404")
	}
	if IsStatus(nil, http.StatusNotFound, "NoSuchKey") {
		t.Error("nil matched")
	}
}

func TestBusy(t *testing.T) {
	for _, c := range []int{http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable} {
		if !Busy(fmt.Errorf("put: %w", respErr(c))) {
			t.Errorf("status %d is not busy", c)
		}
	}
	for _, c := range []int{http.StatusNotFound, http.StatusPreconditionFailed, http.StatusForbidden} {
		if Busy(respErr(c)) {
			t.Errorf("status %d is busy", c)
		}
	}
	if Busy(errors.New("plain")) || Busy(nil) {
		t.Error("a non-HTTP error is busy")
	}
}
