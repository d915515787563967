// Command validate checks a rendered Switchyard chart (`helm template ... | validate`)
// against the Kubernetes API types: every object decodes strictly (an unknown or
// duplicated field is an error, as `kubectl apply --validate=strict` has it), and the
// objects agree with each other and with the PathwaysJob layout the chart promises.
// It needs no cluster and no network.
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// The name every fleet certificate must carry (src/common/grpc_server.h).
const fleetServerName = "switchyard"

type rendered struct {
	jobs            []*batchv1.Job
	services        []*corev1.Service
	accounts        map[string]bool
	networkPolicies []*networkingv1.NetworkPolicy
	secrets         map[string]*corev1.Secret
}

var problems []string

func fail(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

func main() {
	sliceCount := flag.Int("slices", -1, "worker groups the render must have")
	hosts := flag.Int("hosts-per-slice", 1, "pods each worker group must have")
	userJob := flag.Bool("user-job", false, "the head must run the user's program (job mode)")
	tls := flag.Bool("tls", true, "the fleet must run mutual TLS (the chart's default)")
	flag.Parse()

	objects := decodeAll(os.Stdin)
	r := rendered{accounts: map[string]bool{}, secrets: map[string]*corev1.Secret{}}
	for _, object := range objects {
		switch o := object.(type) {
		case *batchv1.Job:
			r.jobs = append(r.jobs, o)
		case *corev1.Service:
			r.services = append(r.services, o)
		case *corev1.ServiceAccount:
			r.accounts[o.Name] = true
			if o.AutomountServiceAccountToken == nil || *o.AutomountServiceAccountToken {
				fail("ServiceAccount %s mounts a token", o.Name)
			}
		case *networkingv1.NetworkPolicy:
			r.networkPolicies = append(r.networkPolicies, o)
		case *corev1.Secret:
			r.secrets[o.Name] = o
			checkTLSSecret(o)
		default:
			fail("unexpected object %T", object)
		}
	}
	checkLayout(&r, *sliceCount, *hosts, *userJob)
	if *sliceCount >= 0 {
		checkInstanceCount(&r, *sliceCount)
	}
	for _, job := range r.jobs {
		checkPod(&r, job.Name, &job.Spec.Template)
	}
	checkServices(&r)
	checkNetworkPolicies(&r)
	checkFleetTLS(&r, *tls)

	if len(problems) > 0 {
		sort.Strings(problems)
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "invalid:", p)
		}
		os.Exit(1)
	}
	fmt.Printf("valid: %d objects (%d jobs, %d services, %d network policies, %d secrets)\n",
		len(objects), len(r.jobs), len(r.services), len(r.networkPolicies), len(r.secrets))
}

// decodeAll strictly decodes every YAML document of the stream into its API type.
func decodeAll(in io.Reader) []runtime.Object {
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	decoder := codecs.UniversalDeserializer()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(in))
	var objects []runtime.Object
	for {
		doc, err := reader.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			fail("reading the render: %v", err)
			break
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		object, kind, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			fail("%v in:\n%s", err, firstLines(doc, 6))
			continue
		}
		if kind.Version == "" || kind.Kind == "" {
			fail("a document without apiVersion or kind")
			continue
		}
		objects = append(objects, object)
	}
	if len(objects) == 0 {
		fail("the render is empty")
	}
	return objects
}

func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			out.WriteString(line + "\n")
		}
	}
	return out.Bytes()
}

func firstLines(doc []byte, n int) string {
	lines := strings.Split(string(doc), "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

func checkLayout(r *rendered, sliceCount, hosts int, userJob bool) {
	var head *batchv1.Job
	workers := map[string]*batchv1.Job{}
	for _, job := range r.jobs {
		checkName("Job", job.Name)
		switch job.Labels["app.kubernetes.io/component"] {
		case "head":
			if head != nil {
				fail("two head Jobs")
			}
			head = job
		case "worker":
			workers[job.Labels["switchyard.dev/slice"]] = job
		default:
			fail("Job %s has no component label", job.Name)
		}
	}
	if head == nil {
		fail("no head Job")
	} else {
		checkHead(head, userJob)
	}
	if sliceCount >= 0 && len(workers) != sliceCount {
		fail("%d worker groups, want %d", len(workers), sliceCount)
	}
	for i := 0; i < len(workers); i++ {
		job, ok := workers[fmt.Sprint(i)]
		if !ok {
			fail("no worker group for slice %d", i)
			continue
		}
		spec := job.Spec
		if spec.CompletionMode == nil || *spec.CompletionMode != batchv1.IndexedCompletion {
			fail("Job %s is not Indexed (the host index is the completion index)", job.Name)
		}
		if spec.Completions == nil || int(*spec.Completions) != hosts ||
			spec.Parallelism == nil || int(*spec.Parallelism) != hosts {
			fail("Job %s does not run %d pods at once", job.Name, hosts)
		}
		args := strings.Join(spec.Template.Spec.Containers[0].Args, " ")
		for _, want := range []string{"worker ", fmt.Sprintf("--slice_index=%d ", i),
			"--host_index=$(HOST_INDEX)", "--server_port=29005", "--resource_manager_address=",
			fmt.Sprintf("--num_nodes=%d ", hosts)} {
			if !strings.Contains(args+" ", want) {
				fail("Job %s: worker args %q lack %q", job.Name, args, want)
			}
		}
		if !hasShm(&spec.Template.Spec) {
			fail("Job %s: no memory-backed /dev/shm for the sidecar", job.Name)
		}
	}
}

// checkInstanceCount: the rm declares the fleet, so a stray worker is refused.
func checkInstanceCount(r *rendered, sliceCount int) {
	want := fmt.Sprintf("--instance_count=%d", sliceCount)
	for _, job := range r.jobs {
		pod := job.Spec.Template.Spec
		for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
			if c.Name == "rm" && !slices.Contains(c.Args, want) {
				fail("head: the rm's args %v lack %s", c.Args, want)
			}
		}
	}
}

func checkHead(head *batchv1.Job, userJob bool) {
	pod := head.Spec.Template.Spec
	byName := map[string]corev1.Container{}
	for _, c := range pod.InitContainers {
		byName[c.Name] = c
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			fail("head init container %s is not a native sidecar", c.Name)
		}
	}
	for _, c := range pod.Containers {
		byName[c.Name] = c
	}
	rm, proxy := byName["rm"], byName["proxy"]
	if len(rm.Args) == 0 || rm.Args[0] != "rm" || !slices.Contains(rm.Args, "--server_port=29001") {
		fail("head: no rm on 29001 (args %v)", rm.Args)
	}
	if len(proxy.Args) == 0 || proxy.Args[0] != "proxy" || !slices.Contains(proxy.Args, "--server_port=29000") {
		fail("head: no proxy on 29000 (args %v)", proxy.Args)
	}
	main, hasMain := byName["main"]
	if userJob != hasMain {
		fail("head: user job container present=%v, want %v", hasMain, userJob)
	}
	if hasMain {
		if pod.RestartPolicy != corev1.RestartPolicyNever || len(pod.Containers) != 1 {
			fail("job mode: the user's program must be the pod's only main container, never restarted")
		}
		env := map[string]string{}
		for _, e := range main.Env {
			env[e.Name] = e.Value
		}
		if env["JAX_PLATFORMS"] != "proxy" || !strings.HasPrefix(env["JAX_BACKEND_TARGET"], "grpc://localhost:") {
			fail("job mode: the user's program is not pointed at the proxy: %v", env)
		}
	}
}

func checkPod(r *rendered, owner string, template *corev1.PodTemplateSpec) {
	pod := &template.Spec
	for key, value := range template.Labels {
		checkLabel(owner, key, value)
	}
	if pod.RestartPolicy != corev1.RestartPolicyNever && pod.RestartPolicy != corev1.RestartPolicyOnFailure {
		fail("%s: a Job's pods restart Never or OnFailure, not %q", owner, pod.RestartPolicy)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		fail("%s: the pod mounts a service-account token it does not use", owner)
	}
	if !r.accounts[pod.ServiceAccountName] {
		fail("%s: service account %q is not in the render", owner, pod.ServiceAccountName)
	}
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		if volumes[v.Name] {
			fail("%s: volume %s twice", owner, v.Name)
		}
		volumes[v.Name] = true
	}
	names := map[string]bool{}
	all := append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...)
	for _, c := range all {
		where := owner + "/" + c.Name
		if names[c.Name] {
			fail("%s: container name used twice", where)
		}
		names[c.Name] = true
		if errs := validation.IsDNS1123Label(c.Name); len(errs) > 0 {
			fail("%s: %v", where, errs)
		}
		if c.Image == "" {
			fail("%s: no image", where)
		}
		if _, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok {
			fail("%s: no memory request", where)
		}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				fail("%s: mounts undefined volume %s", where, m.Name)
			}
		}
		ports := map[string]bool{}
		for _, p := range c.Ports {
			if errs := validation.IsValidPortNum(int(p.ContainerPort)); len(errs) > 0 {
				fail("%s: port %d: %v", where, p.ContainerPort, errs)
			}
			if errs := validation.IsValidPortName(p.Name); len(errs) > 0 {
				fail("%s: port name %q: %v", where, p.Name, errs)
			}
			ports[p.Name] = true
		}
		if probe := c.ReadinessProbe; probe != nil && probe.TCPSocket != nil &&
			probe.TCPSocket.Port.StrVal != "" && !ports[probe.TCPSocket.Port.StrVal] {
			fail("%s: readiness probe on unknown port %s", where, probe.TCPSocket.Port.StrVal)
		}
		defined := map[string]bool{}
		for _, e := range c.Env {
			defined[e.Name] = true
		}
		for _, arg := range c.Args {
			for _, ref := range references(arg) {
				if !defined[ref] {
					fail("%s: argument %q names $(%s), which the container does not define", where, arg, ref)
				}
			}
		}
		if c.Name != "main" {
			sc := c.SecurityContext
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				fail("%s: not locked down (privilege escalation, writable root)", where)
			}
		}
	}
}

// references lists the $(VAR) names Kubernetes expands in an argument.
func references(arg string) []string {
	var out []string
	for {
		start := strings.Index(arg, "$(")
		if start < 0 {
			return out
		}
		end := strings.Index(arg[start:], ")")
		if end < 0 {
			return out
		}
		out = append(out, arg[start+2:start+end])
		arg = arg[start+end:]
	}
}

func checkServices(r *rendered) {
	for _, svc := range r.services {
		if errs := validation.IsDNS1035Label(svc.Name); len(errs) > 0 {
			fail("Service %s: %v", svc.Name, errs)
		}
		selector := labels.SelectorFromSet(svc.Spec.Selector)
		matched := 0
		for _, job := range r.jobs {
			template := job.Spec.Template
			if !selector.Matches(labels.Set(template.Labels)) {
				continue
			}
			matched++
			named := map[string]bool{}
			for _, c := range append(append([]corev1.Container{}, template.Spec.InitContainers...),
				template.Spec.Containers...) {
				for _, p := range c.Ports {
					named[p.Name] = true
				}
			}
			for _, p := range svc.Spec.Ports {
				if p.TargetPort.StrVal != "" && !named[p.TargetPort.StrVal] {
					fail("Service %s: target port %s is not on the pods of %s", svc.Name,
						p.TargetPort.StrVal, job.Name)
				}
			}
		}
		if matched == 0 {
			fail("Service %s selects no pods", svc.Name)
		}
	}
}

func checkNetworkPolicies(r *rendered) {
	denyAll := false
	for _, np := range r.networkPolicies {
		selector := labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels)
		isDeny := len(np.Spec.Ingress) == 0 && len(np.Spec.Egress) == 0 &&
			len(np.Spec.PolicyTypes) == 2
		if !isDeny {
			continue
		}
		covers := true
		for _, job := range r.jobs {
			covers = covers && selector.Matches(labels.Set(job.Spec.Template.Labels))
		}
		denyAll = denyAll || covers
	}
	if !denyAll {
		fail("no default-deny NetworkPolicy covers every pod")
	}
}

func hasShm(pod *corev1.PodSpec) bool {
	memory := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory {
			memory[v.Name] = true
		}
	}
	for _, c := range pod.Containers {
		for _, m := range c.VolumeMounts {
			if m.MountPath == "/dev/shm" && memory[m.Name] {
				return true
			}
		}
	}
	return false
}

func checkName(kind, name string) {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		fail("%s %s: %v", kind, name, errs)
	}
}

func checkLabel(owner, key, value string) {
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		fail("%s: label key %q: %v", owner, key, errs)
	}
	if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
		fail("%s: label %s=%q: %v", owner, key, value, errs)
	}
}

// checkTLSSecret: a certificate the chart made is one the fleet's channels accept: it
// names DNS "switchyard", serves as server and client, and its CA signed it.
func checkTLSSecret(secret *corev1.Secret) {
	where := "Secret " + secret.Name
	for _, key := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if len(secret.Data[key]) == 0 {
			fail("%s: no %s", where, key)
			return
		}
	}
	if _, err := tls.X509KeyPair(secret.Data["tls.crt"], secret.Data["tls.key"]); err != nil {
		fail("%s: tls.crt and tls.key do not pair: %v", where, err)
	}
	caBlock, _ := pem.Decode(secret.Data["ca.crt"])
	certBlock, _ := pem.Decode(secret.Data["tls.crt"])
	if caBlock == nil || certBlock == nil {
		fail("%s: ca.crt or tls.crt is not PEM", where)
		return
	}
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		fail("%s: ca.crt: %v", where, err)
		return
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		fail("%s: tls.crt: %v", where, err)
		return
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: fleetServerName, Roots: roots,
			KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			fail("%s: tls.crt does not verify for %q as usage %v: %v", where, fleetServerName, usage, err)
		}
	}
}

// checkFleetTLS: with TLS on, every Switchyard process (rm, proxy, worker) runs it, from a
// Secret that is in the render or named by the user.
func checkFleetTLS(r *rendered, want bool) {
	for _, job := range r.jobs {
		pod := job.Spec.Template.Spec
		secrets := map[string]string{}
		for _, v := range pod.Volumes {
			if v.Secret != nil {
				secrets[v.Name] = v.Secret.SecretName
			}
		}
		for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
			if c.Name == "main" {
				continue // the user's program: a client of the proxy's port
			}
			where := job.Name + "/" + c.Name
			args := strings.Join(c.Args, " ")
			has := strings.Contains(args, "--tls_key_file=")
			if has != want {
				fail("%s: mutual TLS is %v, want %v (args %s)", where, has, want, args)
			}
			if !has {
				continue
			}
			mounted := false
			for _, m := range c.VolumeMounts {
				if m.MountPath == "/etc/switchyard/tls" {
					mounted = secrets[m.Name] != ""
				}
			}
			if !mounted {
				fail("%s: the TLS files are not mounted from a Secret", where)
			}
		}
	}
}
