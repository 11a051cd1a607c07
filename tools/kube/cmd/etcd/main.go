// Command etcd is etcd's own server entry point, built here so that local
// clusters need nothing but Go.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
