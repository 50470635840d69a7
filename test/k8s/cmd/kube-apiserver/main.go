// Command kube-apiserver is the upstream Kubernetes API server, built from
// k8s.io/kubernetes at the version pinned in this module's go.mod. edihub's
// tests start it (with etcd) through package test/controlplane.
package main

import (
	"os"
	_ "time/tzdata" // for timeZone support in CronJob, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
