package flashserve

import (
	"errors"
	"io"
	"net/http"

	"go.uber.org/zap"

	"github.com/flashserve/caddy-flash-serve/statacc"
	"github.com/flashserve/caddy-flash-serve/transmit"
)

// transmit writes the status line, the headers that decide set, and the
// body bytes.
func (fsrv *FlashServe) transmit(w http.ResponseWriter, r *http.Request, res *resolved, p *plan) error {
	w.WriteHeader(p.status)
	if p.errorText != "" {
		// Written for HEAD too, as http.Error does, so that net/http derives
		// the same Content-Length.
		io.WriteString(w, p.errorText)
		return nil
	}
	if p.noBody || r.Method == http.MethodHead {
		return nil
	}
	var err error
	switch {
	case p.boundary != "":
		err = sendMultipart(w, res, p)
	case p.ranges != nil:
		err = sendRange(w, res.body, p.ranges[0].start, p.ranges[0].length)
	default:
		err = sendRange(w, res.body, 0, p.length)
	}
	if err == nil {
		return nil
	}
	var re *transmit.ReadError
	if errors.As(err, &re) {
		// The headers promised bytes that can no longer be read. Padding or
		// sending other bytes would corrupt the client's copy without its
		// knowing; cutting the connection tells it the body is incomplete.
		fsrv.logger.Error("aborting response: file read failed mid-body",
			zap.String("filename", res.body.Path), zap.Error(err))
		panic(http.ErrAbortHandler)
	}
	// The client went away; there is nobody left to answer.
	fsrv.logger.Debug("client write failed", zap.String("filename", res.body.Path), zap.Error(err))
	return nil
}

// sendMultipart writes a multipart/byteranges body.
func sendMultipart(w io.Writer, res *resolved, p *plan) error {
	var hdr [256]byte
	for i, r := range p.ranges {
		if _, err := w.Write(appendPartHeader(hdr[:0], i, r, p.boundary, p.partType, res.body.Size)); err != nil {
			return err
		}
		if err := sendRange(w, res.body, r.start, r.length); err != nil {
			return err
		}
	}
	_, err := w.Write(appendMultipartEnd(hdr[:0], p.boundary))
	return err
}

// sendRange sends length bytes of the body from offset start: from memory
// when the file is small enough to be kept there, else through the copy
// engine.
func sendRange(w io.Writer, body *statacc.Entry, start, length int64) error {
	if body.Data != nil {
		_, err := w.Write(body.Data[start : start+length])
		return err
	}
	_, err := transmit.Copy(w, body.File(), start, length)
	return err
}
