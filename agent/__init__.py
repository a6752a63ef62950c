"""Node-side runtime: the broker (`broker`), the Kubernetes node agent (`node`), and the
Kubernetes plumbing the node agent and the binder share (`kube`)."""
