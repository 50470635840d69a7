// Package docs checks the reference documentation in docs/ against the
// code it describes, so that a doc that falls behind fails a test rather
// than misleading the next reader.
package docs
