// Package style checks, over the module's source, the forms the style
// guide (how code is written here) names where a reviewer would
// otherwise have to spot them by eye.
package style
