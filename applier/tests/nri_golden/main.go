// Writes NRI messages encoded by the NRI Go module itself (the API containerd 2.4.2 links) as
// golden files for applier/tests/nri_golden.rs, which checks the applier's hand-declared
// messages against them. Regenerate (needs Go and the module proxy; CI does not run this):
//
//	cd applier/tests/nri_golden && go mod tidy && go run . ../fixtures/nri
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run . OUTDIR")
		os.Exit(2)
	}
	out := os.Args[1]
	pod := &api.PodSandbox{
		Id:          "6e1f7b9d",
		Name:        "redis-0",
		Uid:         "0f0f0f0f-1111-4222-8333-444455556666",
		Namespace:   "shop",
		Labels:      map[string]string{"app": "redis"},
		Annotations: map[string]string{"koordinator.sh/resolved-qos": "{}"},
		Linux: &api.LinuxPodSandbox{
			CgroupParent: "/kubepods/burstable/pod0f0f0f0f-1111-4222-8333-444455556666",
		},
		Ips: []string{"10.249.0.130"},
	}
	ctr := &api.Container{
		Id:           "c0ffee",
		PodSandboxId: "6e1f7b9d",
		Name:         "redis",
		State:        api.ContainerState_CONTAINER_CREATED,
		Args:         []string{"redis-server", "--save", ""},
		Env:          []string{"PATH=/usr/bin"},
		Mounts:       []*api.Mount{{Destination: "/data", Type: "bind", Source: "/var/lib/x", Options: []string{"rbind"}}},
		Linux: &api.LinuxContainer{
			Resources: &api.LinuxResources{
				Memory:  &api.LinuxMemory{Limit: api.Int64(536870912)},
				Cpu:     &api.LinuxCPU{Shares: api.UInt64(51), Quota: api.Int64(50000), Period: api.UInt64(100000)},
				Unified: map[string]string{"memory.oom.group": "1"},
			},
			CgroupsPath: "/kubepods/burstable/pod0f0f0f0f-1111-4222-8333-444455556666/c0ffee",
		},
	}
	resources := &api.LinuxResources{
		Memory: &api.LinuxMemory{Limit: api.Int64(134217728)},
		Cpu:    &api.LinuxCPU{Shares: api.UInt64(1024), Quota: api.Int64(50000), Period: api.UInt64(100000)},
		Unified: map[string]string{
			"memory.min": "134217728", "memory.low": "134217728", "memory.high": "max",
			"cpu.max": "50000 100000",
		},
	}
	msgs := map[string]proto.Message{
		"create_container_request": &api.CreateContainerRequest{Pod: pod, Container: ctr},
		"create_container_response": &api.CreateContainerResponse{
			Adjust: &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Resources: resources}},
			Update: []*api.ContainerUpdate{{ContainerId: "c0ffee", Linux: &api.LinuxContainerUpdate{Resources: resources}, IgnoreFailure: true}},
		},
		"update_container_request": &api.UpdateContainerRequest{Pod: pod, Container: ctr, LinuxResources: resources},
		"update_containers_request": &api.UpdateContainersRequest{
			Update: []*api.ContainerUpdate{{ContainerId: "c0ffee", Linux: &api.LinuxContainerUpdate{Resources: resources}, IgnoreFailure: true}},
		},
		"configure_request": &api.ConfigureRequest{
			Config: "", RuntimeName: "containerd", RuntimeVersion: "v2.4.2",
			RegistrationTimeout: 5000, RequestTimeout: 2000, NRIVersion: "v0.12.3",
		},
		"configure_response":     &api.ConfigureResponse{Events: 0x89},
		"synchronize_request":    &api.SynchronizeRequest{Pods: []*api.PodSandbox{pod}, Containers: []*api.Container{ctr}, More: true},
		"register_plugin_request": &api.RegisterPluginRequest{PluginName: "koord-applier", PluginIdx: "50", NRIVersion: "v0.12.3"},
		"run_pod_sandbox_request": &api.RunPodSandboxRequest{Pod: pod},
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		panic(err)
	}
	for name, m := range msgs {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			panic(err)
		}
		if err := os.WriteFile(filepath.Join(out, name+".bin"), b, 0o644); err != nil {
			panic(err)
		}
	}
}
