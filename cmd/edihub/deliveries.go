package main

import (
	"github.com/edihub/edihub/internal/connector"
	"github.com/edihub/edihub/internal/outbox"
)

// deliveries is what delivering received documents to the connectors'
// destinations needs on a replica: the routes in force and the
// destinations by name. With route nil no deliveries are queued; with
// destinations nil this replica's dispatcher leaves deliveries to others.
type deliveries struct {
	route        func(connector.Document) (route string, destinations []string)
	destinations outbox.Destinations
}

// newDeliveries returns the deliveries of r: the routes and destinations
// of the connectors document in force.
func newDeliveries(r *replica) deliveries {
	return deliveries{route: r.runtime.Route, destinations: r.runtime}
}
