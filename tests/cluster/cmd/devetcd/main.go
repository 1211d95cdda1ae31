// Command devetcd runs a one-member etcd on loopback for trying several
// runtime nodes on one machine (make run-cluster): the same embedded
// server the cluster tests use. Its data lives in a temporary directory,
// removed when it exits, and fsync is off: never for production, where
// etcd is deployed as etcd (docs/cluster.md).
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:2379", "client listen address (loopback)")
	peer := flag.String("peer", "127.0.0.1:2380", "peer listen address (loopback)")
	flag.Parse()
	dir, err := os.MkdirTemp("", "devetcd-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfg := embed.NewConfig()
	cfg.Name = "dev"
	cfg.Dir = dir
	cfg.UnsafeNoFsync = true
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	client := url.URL{Scheme: "http", Host: *listen}
	peers := url.URL{Scheme: "http", Host: *peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peers}, []url.URL{peers}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("devetcd: %v", err)
	}
	defer e.Close()
	<-e.Server.ReadyNotify()
	fmt.Printf("devetcd: serving on http://%s (data in %s, removed at exit)\n", *listen, dir)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sig:
	case err := <-e.Err():
		log.Printf("devetcd: %v", err)
	}
}
