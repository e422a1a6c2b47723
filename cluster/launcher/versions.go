package main

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// versions is cluster/versions.yaml: the one place the components' releases are pinned.
type versions struct {
	Kubernetes        string `json:"kubernetes"`
	KubernetesStaging string `json:"kubernetes-staging"`
	Etcd              string `json:"etcd"`
	TrainingOperator  string `json:"training-operator"`
	Trainer           string `json:"trainer"`
	JobSet            string `json:"jobset"`
}

func loadVersions(root string) (versions, error) {
	var v versions
	data, err := os.ReadFile(filepath.Join(root, "versions.yaml"))
	if err != nil {
		return v, err
	}
	if err := yaml.UnmarshalStrict(data, &v); err != nil {
		return v, fmt.Errorf("%s: %w", filepath.Join(root, "versions.yaml"), err)
	}
	for name, value := range map[string]string{
		"kubernetes": v.Kubernetes, "kubernetes-staging": v.KubernetesStaging, "etcd": v.Etcd,
		"training-operator": v.TrainingOperator, "trainer": v.Trainer, "jobset": v.JobSet,
	} {
		if value == "" {
			return v, fmt.Errorf("%s: %s: missing", filepath.Join(root, "versions.yaml"), name)
		}
	}
	return v, nil
}
