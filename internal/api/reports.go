package api

import (
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/report"
)

// reportTypes maps report formats to content types.
var reportTypes = map[string]string{
	"html": "text/html; charset=utf-8",
	"text": "text/plain; charset=utf-8",
	"csv":  "text/csv; charset=utf-8",
	"json": "application/json",
	"png":  "image/png",
}

// reportFormat is ?format=, else the first known type in Accept, else json.
func reportFormat(r *http.Request) string {
	if f := r.URL.Query().Get("format"); f != "" {
		return f
	}
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		for f, ct := range reportTypes {
			if want, _, _ := mime.ParseMediaType(ct); want == mt {
				return f
			}
		}
	}
	return "json"
}

func (h *handler) report(w http.ResponseWriter, r *http.Request) {
	format := reportFormat(r)
	b, err := h.o.Reports.Render(r.Context(), chi.URLParam(r, "day"), format)
	switch {
	case errors.Is(err, report.ErrInvalidDay):
		writeError(w, http.StatusBadRequest, "day", err.Error())
		return
	case errors.Is(err, report.ErrUnknownFormat):
		writeError(w, http.StatusBadRequest, "format", err.Error())
		return
	case err != nil:
		h.log.Error("render report", zap.Error(err))
		writeError(w, http.StatusServiceUnavailable, "", "the report could not be built; try again later")
		return
	}
	w.Header().Set("Content-Type", reportTypes[format])
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Header().Set("Vary", "Accept")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}
