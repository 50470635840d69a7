// Command etcd is the upstream etcd server, built from
// go.etcd.io/etcd/server/v3 at the version pinned in this module's go.mod
// (the one k8s.io/kubernetes requires). edihub's tests start it through
// package test/controlplane as the storage of kube-apiserver.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
