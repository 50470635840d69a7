package api

import (
	"fmt"
	"net/http"
	"strconv"

	"go.uber.org/zap"
)

// listPage answers the paging of an id-paged listing: it reads the
// limit and cursor of r (answering 400 itself), fetches one row more
// than the limit (which tells whether a next page exists; 500 on an
// error, logged as reading what), and cuts the page. ok is false when it
// answered.
func listPage[T, V any](h *handler, w http.ResponseWriter, r *http.Request, what string, fetch func(limit int, before int64) ([]T, error), id func(T) int64, view func(T) V) (items []V, next string, ok bool) {
	limit, before, ok := page(w, r)
	if !ok {
		return nil, "", false
	}
	rows, err := fetch(limit+1, before)
	if err != nil {
		h.log.Error("list "+what, zap.Error(err))
		writeError(w, http.StatusInternalServerError, "", what+" could not be read; retry later")
		return nil, "", false
	}
	items, next = cut(rows, limit, id, view)
	return items, next, true
}

// cut keeps the first limit rows of a page read with one row more than
// limit, as views, and returns the cursor of the next page ("" on the last).
func cut[T, V any](rows []T, limit int, id func(T) int64, view func(T) V) ([]V, string) {
	out := make([]V, 0, min(len(rows), limit))
	for i, r := range rows {
		if i == limit {
			return out, strconv.FormatInt(id(rows[i-1]), 10)
		}
		out = append(out, view(r))
	}
	return out, ""
}

// page reads the limit (default DefaultLimit, at most MaxLimit) and cursor
// (an id: the page holds smaller ones) of a listing that pages by id,
// newest first. ok is false when it answered 400 naming the parameter.
func page(w http.ResponseWriter, r *http.Request) (limit int, before int64, ok bool) {
	q := r.URL.Query()
	limit = DefaultLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			writeError(w, http.StatusBadRequest, "limit", fmt.Sprintf("limit %q: want a whole number from 1 to %d", v, MaxLimit))
			return 0, 0, false
		}
		limit = n
	}
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "cursor", fmt.Sprintf("cursor %q: use the next_cursor of the previous page", v))
			return 0, 0, false
		}
		before = n
	}
	return limit, before, true
}
