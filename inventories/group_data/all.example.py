## Sample group data: every role setting, commented out, with its default. Generated from the roles'
## Settings (the fields of README "Role settings") by `python -m tritonfleet.face.docgen --write`:
## do not edit it here; a test fails when it is out of date. pyinfra reads it as the data of a group
## "all.example" that no host is in, so it changes nothing.
##
## Use: copy it to group_data/all.py (every host) or to a group's file (group_data/<group>.py, e.g.
## inf2.py for the hosts of inventories/inf2.py), keep the settings you change and uncomment them; a
## setting left commented keeps its role default. Keep secrets out of git: read them from the
## environment, e.g. triton_repository_secret = os.environ.get("TRITONFLEET_REPOSITORY_SECRET").
##
## "## " lines describe the setting below them; "# key = value" is the setting, with its default.

## -------------------------------------------------------------------------------------------------
## Keys of no role (usually host data, set in the inventory)
## -------------------------------------------------------------------------------------------------

## instance_type: EC2 instance type, e.g. inf2.xlarge; read from IMDS on the host when absent.
## imds_endpoint: Instance metadata endpoint used when instance_type is absent.

## -------------------------------------------------------------------------------------------------
## connection (roles/connection.py): SSH keepalives and a dead-peer timeout for every host
## -------------------------------------------------------------------------------------------------

## Seconds between SSH keepalive messages.
## bounds: >= 1, <= 300
# connection_keepalive = 10

## Seconds a host may leave keepalives and commands unanswered before its connection is closed and
## the host is reported failed (TCP_USER_TIMEOUT).
## bounds: >= 5, <= 3600
# connection_dead_after = 60

## -------------------------------------------------------------------------------------------------
## base (roles/base.py): the tools the other roles use, memlock limit
## -------------------------------------------------------------------------------------------------

## Packages the roles rely on (keys, downloads), by logical name; the platform maps them (AL2023's
## curl-minimal and gnupg2-minimal already provide curl and gpg).
# base_packages = ['ca-certificates', 'curl', 'gnupg']

## /etc/security/limits.d memlock for all users ("unlimited" or a positive number of KiB).
# base_memlock_limit = 'unlimited'

## Mount /proc with hidepid=invisible: local users see only their own processes, so Triton's command
## line (it carries the repository secret) is visible to root only.
# base_hide_processes = True

## -------------------------------------------------------------------------------------------------
## sysctl (roles/sysctl.py): kernel parameters (sysctl.d)
## -------------------------------------------------------------------------------------------------

## Kernel parameters, e.g. {"net.core.somaxconn": 4096}; written to
## /etc/sysctl.d/90-tritonfleet.conf and applied. {} leaves the kernel as it is.
# sysctl_params = {}

## -------------------------------------------------------------------------------------------------
## neuron (roles/neuron.py): Neuron repository, pinned driver and tools, legacy cleanup, device
## check
## -------------------------------------------------------------------------------------------------

## Neuron SDK release whose component versions are pinned (see neuron_releases).
# neuron_sdk_release = '2.32.0'

## SDK release -> {package: version}; versions are pinned by whole components ("2.29" -> "2.29.*").
# neuron_releases = {'2.32.0': {'aws-neuronx-dkms': '2.30.2.0',
#                               'aws-neuronx-runtime-lib': '2.34.10.0',
#                               'aws-neuronx-collectives': '2.34.10.0',
#                               'aws-neuronx-tools': '2.32.28.0'},
#                    '2.31.0': {'aws-neuronx-dkms': '2.29', 'aws-neuronx-runtime-lib': '2.33'},
#                    '2.30.0': {'aws-neuronx-dkms': '2.28.0.0',
#                               'aws-neuronx-runtime-lib': '2.32.31.0'},
#                    '2.29.0': {'aws-neuronx-dkms': '2.27.4.0',
#                               'aws-neuronx-runtime-lib': '2.31.24.0'},
#                    '2.28.0': {'aws-neuronx-dkms': '2.26.5.0',
#                               'aws-neuronx-runtime-lib': '2.30.50.0'},
#                    '2.26.0': {'aws-neuronx-dkms': '2.24.7.0',
#                               'aws-neuronx-runtime-lib': '2.28.19.0'},
#                    '2.21.0': {'aws-neuronx-runtime-lib': '2.23.110'}}

## Neuron apt repository URL.
# neuron_apt_url = 'https://apt.repos.neuron.amazonaws.com'

## apt suite; None = the OS codename (jammy, noble, bookworm).
# neuron_apt_suite = None

## dnf repository (Amazon Linux 2023).
# neuron_yum_url = 'https://yum.repos.neuron.amazonaws.com'

## Repository key URL; None = <apt_url>/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB.
# neuron_key_url = None

## Expected key fingerprint (required on Neuron hosts; a mismatch fails before anything is
## installed).
# neuron_key_fingerprint = None

## aws-neuronx-tools on the host (neuron-ls, neuron-top, neuron-monitor).
# neuron_install_tools = True

## aws-neuronx-runtime-lib on the host (off: the runtime belongs in the Triton image).
# neuron_install_runtime = False

## aws-neuronx-collectives on the host (off: it belongs in the image).
# neuron_install_collectives = False

## aws-neuronx-oci-hook (only for AWS_NEURON_VISIBLE_DEVICES-style containers).
# neuron_install_oci_hook = False

## inf1 stays on the last driver line that supports it.
# neuron_inf1_dkms_pin = '2.24.*'

## Explicit aws-neuronx-dkms version pattern (overrides the release table and the inf1 pin).
# neuron_dkms_version = None

## Stop/remove neuron-rtd (aws-neuron-runtime) and replace aws-neuron-dkms by aws-neuronx-dkms.
# neuron_remove_legacy = True

## Install headers for the running kernel so DKMS can build the driver.
# neuron_kernel_headers = True

## -------------------------------------------------------------------------------------------------
## efa (roles/efa.py): EFA installer (signature verified) where the instance type has EFA
## -------------------------------------------------------------------------------------------------

## "auto" on Neuron instance types that have EFA (trn1.32xlarge, trn1n, trn2), "always" or "never".
## allowed: 'auto', 'always', 'never'
# efa_install = 'auto'

## EFA installer tarball.
# efa_installer_url = 'https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz'

## Its detached signature; None = <installer_url>.sig.
# efa_signature_url = None

## The key the signature is checked with.
# efa_key_url = 'https://efa-installer.amazonaws.com/aws-efa-installer.key'

## Expected fingerprint of that key (required where EFA is installed).
# efa_key_fingerprint = None

## -------------------------------------------------------------------------------------------------
## nvidia (roles/nvidia.py): NVIDIA driver and container toolkit (signed repository), GPU check
## -------------------------------------------------------------------------------------------------

## NVIDIA driver branch (e.g. 550).
# nvidia_driver_branch = '550'

## Driver package ({branch} is substituted); None = the platform's (nvidia-driver-{branch}-server on
## Ubuntu/Debian; none on Amazon Linux 2023, whose GPU DLAMIs ship the driver).
# nvidia_driver_package = None

## nvidia-container-toolkit flat apt repository.
# nvidia_toolkit_apt_url = 'https://nvidia.github.io/libnvidia-container/stable/deb/amd64'

## nvidia-container-toolkit rpm repository.
# nvidia_toolkit_yum_url = 'https://nvidia.github.io/libnvidia-container/stable/rpm/x86_64'

## Repository key URL; None = https://nvidia.github.io/libnvidia-container/gpgkey.
# nvidia_key_url = None

## Expected key fingerprint (required on GPU hosts).
# nvidia_key_fingerprint = None

## Optional nvidia-container-toolkit version pattern, e.g. "1.17.*".
# nvidia_toolkit_version = None

## -------------------------------------------------------------------------------------------------
## docker (roles/docker.py): Docker engine, daemon.json (log rotation, live-restore, ulimits, nvidia
## runtime)
## -------------------------------------------------------------------------------------------------

## Engine package; None = the platform's (docker.io on Ubuntu/Debian, docker on Amazon Linux 2023).
# docker_package = None

## Optional data-root (e.g. an instance-store or EBS mount); None keeps /var/lib/docker.
# docker_data_root = None

## json-file log rotation: size of one log file.
# docker_log_max_size = '100m'

## json-file log rotation: files kept per container.
## bounds: >= 1, <= 100
# docker_log_max_file = 5

## Keep containers running while dockerd restarts (config changes, upgrades).
# docker_live_restore = True

## memlock limit of every container, default-ulimits and Triton's --ulimit (-1 = unlimited; Neuron
## needs it).
## bounds: >= -1, <= 9223372036854775807
# docker_ulimit_memlock = -1

## stack limit of every container, default-ulimits and Triton's --ulimit (64 MiB).
## bounds: >= -1, <= 9223372036854775807
# docker_ulimit_stack = 67108864

## -------------------------------------------------------------------------------------------------
## agent (roles/agent.py): the host agent (S3 model sync, QA runner), installed from a wheelhouse
## -------------------------------------------------------------------------------------------------

## Host interpreter (3.9 to 3.12) the agent's venv is made with, e.g. python3.11 on Amazon Linux.
# agent_python = 'python3'

## -------------------------------------------------------------------------------------------------
## models (roles/models.py): the model repository on the host (S3 sync, S3 direct or a controller
## copy)
## -------------------------------------------------------------------------------------------------

## Controller-side model repository to copy to the host (None: leave models_dir as it is).
# models_source = None

## Model repository on the host, mounted read-only into every Triton container at /models (with S3
## sync: the root of current/ and versions/).
# models_dir = '/opt/tritonfleet/models'

## s3://bucket/prefix of the model repository (S3 sync).
# models_s3_uri = None

## S3 endpoint URL; None = AWS's for the region.
# models_s3_endpoint = None

## S3 region, e.g. us-east-1; None = the host's default.
# models_s3_region = None

## Parallel GET requests of a sync.
## bounds: >= 1, <= 256
# models_s3_concurrency = 16

## Versions kept on the host, the current one included (at least 2: the previous one is what a
## failed reload switches back to).
## bounds: >= 2, <= 100
# models_s3_keep = 3

## Seconds S3 has to accept a connection, per attempt (3 attempts per request).
## bounds: >= 1, <= 300
# models_s3_connect_timeout = 5

## Seconds S3 has to answer, per attempt (3 attempts per request): a hung S3 ends the sync after 3 x
## this, naming the endpoint and what the sync was doing.
## bounds: >= 1, <= 3600
# models_s3_read_timeout = 30

## Seconds the S3 part of a sync (listing, downloads, checks) may take in all; then it stops,
## current unchanged, what was downloaded kept for the next run.
## bounds: >= 10, <= 604800
# models_s3_deadline = 1800

## Seconds a sync waits for another one's lock; then an agent stuck past its own bound is ended, a
## live one is named (pid, age) and the run fails.
## bounds: >= 0, <= 3600
# models_s3_lock_wait = 60

## This run hashes every file of the current version against its manifest and repairs what differs
## (make models VERIFY=1); otherwise only missing, resized and modified-since-checked files are.
# models_s3_verify = False

## systemd OnCalendar= of a scheduled verify on the host (e.g. weekly; a timer runs
## `tritonfleet-agent verify`, repairs go to the journal); None: no timer (removed if there was
## one).
# models_s3_verify_schedule = None

## Triton reads models_s3_uri itself (no copy on disk; a full download on every start; see README).
# models_s3_direct = False

## Pull mode: a resident agent (tritonfleet-models-pull.service) watches models_s3_uri/RELEASE and
## serves the release it names (models_s3_uri/<release>/), reloaded live; `tritonfleet models
## release` moves it.
# models_pull = False

## Pull mode: follow models_s3_uri/RELEASE.<group> while it exists (e.g. canary), else RELEASE.
# models_pull_group = None

## Pull mode: seconds between two checks of the pointer (one conditional GET each).
## bounds: >= 0.2, <= 3600
# models_pull_interval = 2.0

## Pull mode: the longest wait before a release that failed is tried again (the wait doubles from
## models_pull_interval); a changed pointer is tried at once.
## bounds: >= 1, <= 86400
# models_pull_max_backoff = 300.0

## -------------------------------------------------------------------------------------------------
## triton (roles/triton.py): Triton containers: image, compatibility gate, devices, limits, health
## gate
## -------------------------------------------------------------------------------------------------

## Image reference; None with source "build" means tritonfleet/tritonserver-neuron:<content hash>.
# triton_image = None

## "build" (on the host, from triton_base_image), "pull" (registry/ECR) or "archive" (docker load).
## allowed: 'build', 'pull', 'archive'
# triton_image_source = 'build'

## ECR pulls authenticate with the instance profile through amazon-ecr-credential-helper (root's
## docker config.json is managed then).
# triton_ecr_credential_helper = True

## NGC Triton image the Neuron image is built from (24.10 = Triton 2.51).
# triton_base_image = 'nvcr.io/nvidia/tritonserver:24.10-py3'

## `docker save` tarball on the host (source "archive").
# triton_image_archive = None

## ... or on the controller, uploaded to the host first.
# triton_image_archive_src = None

## pip packages baked into the image, each pinned with ==; None = per family
## (compat.FRAMEWORK_PINS).
# triton_neuron_frameworks = None

## Neuron pip index used by the image build.
# triton_neuron_pip_index = 'https://pip.repos.neuron.amazonaws.com'

## Servers on this host, each with its devices, ports and models (see README "Serving"); [] = one
## server with every device.
# triton_servers = []

## Extra python packages for python-backend models, built into the serving image on the host: a
## requirements file on the controller (relative to the directory pyinfra runs in) or a list of
## lines; every line pins one version (name==version), with --hash on every line or on none (then
## --require-hashes: list every dependency). None = the image as it is (see README "Python packages
## in the image").
# triton_python_requirements = None

## http(s) URL of the package index (PEP 503 simple) the python_requirements build installs from,
## without credentials (they would stay in the image history); None = PyPI.
# triton_pip_index = None

## --shm-size of each container.
# triton_shm_size = '1g'

## Address the published ports bind to (0.0.0.0: every interface; keep them behind a security group
## that admits only your load balancer or clients).
# triton_bind_address = '0.0.0.0'

## Models to load (explicit mode) on every server without its own triton_servers[].models; [] =
## every model in the repository.
# triton_models = []

## tritonserver --model-control-mode.
## allowed: 'explicit', 'none', 'poll'
# triton_model_control_mode = 'explicit'

## Refuse a plan whose models do not fit a server's accelerator memory: in preflight with
## models_source, in the agent before it switches current with S3 sync (see README "Serving").
# triton_memory_check = True

## Percent of each server's device memory the memory check and `tritonfleet plan` keep free.
## bounds: >= 0, < 100
# triton_memory_headroom_pct = 10.0

## Header the model-repository API (load/unload/index) requires; lowercase (gRPC metadata keys are).
# triton_repository_header = 'x-tritonfleet-repository-key'

## Per-fleet secret value of that header (required; keep it out of git).
# triton_repository_secret = None

## python backend shm-default-byte-size (1 MiB to 64 GiB).
## bounds: >= 1048576, <= 68719476736
# triton_python_shm_default_byte_size = 16777216

## Extra tritonserver arguments (not the flags tritonfleet manages).
# triton_extra_args = []

## Seconds to wait for server and models to become ready.
## bounds: >= 1, <= 3600
# triton_health_timeout = 180

## NEURON_RT_LOG_LEVEL in the containers.
## allowed: 'TRACE', 'DEBUG', 'INFO', 'WARN', 'WARNING', 'ERROR', 'FATAL'
# triton_neuron_rt_log_level = 'ERROR'

## aws-neuronx-runtime-lib in the image when the image does not label it (None: from the release).
# triton_neuron_runtime_version = None

## Docker restart policy of the containers (Docker owns their lifecycle; see "Serving").
## allowed: 'no', 'always', 'unless-stopped', 'on-failure'
# triton_restart_policy = 'unless-stopped'

## Host networking (off: ports are published per server).
# triton_host_network = False

## Mount /lib/udev read-only at /mylib/udev, where the Neuron Triton scripts expect it.
# triton_udev_mount = True

## Metrics endpoint (port 8002 of each server).
# triton_metrics = True

## Triton APIs that answer only with the repository header (HTTP and gRPC); metrics and inference
## stay open. Remove an entry to open that API.
## allowed items: 'model-repository', 'logging', 'trace', 'shared-memory', 'statistics',
## 'model-config', 'metadata', 'health', 'inference'
# triton_restricted_apis = ['model-repository', 'logging', 'trace', 'shared-memory']

## -------------------------------------------------------------------------------------------------
## qa (roles/qa.py): accuracy QA: suites run on the hosts, now or on a schedule
## -------------------------------------------------------------------------------------------------

## Controller directory of QA suites (qa/<model>.yaml; see README "Quality assurance"); None: no QA.
# qa_suites = None

## Protocol the runner talks to Triton with.
## allowed: 'grpc', 'http'
# qa_protocol = 'grpc'

## Controller directory the reports of `make qa` are fetched to (<dir>/<host>/<UTC
## stamp>.{json,xml}).
# qa_reports_dir = 'reports'

## Seconds a QA run may take on a host.
## bounds: >= 30, <= 86400
# qa_timeout = 900

## Seconds the runner waits for each Triton server to be ready before that server's suites fail.
## bounds: >= 1, <= 3600
# qa_server_wait = 60

## systemd OnCalendar= of the scheduled QA (make qa-schedule).
# qa_schedule = 'hourly'

## RandomizedDelaySec= of the timer, so a fleet does not run QA all at once.
## bounds: >= 0, <= 86400
# qa_schedule_random_delay = 600

## s3://bucket/prefix scheduled runs upload their reports to (<uri>/qa/<host>/); None: kept on the
## host.
# qa_reports_s3_uri = None

## S3 endpoint URL for the reports; None = AWS's.
# qa_reports_s3_endpoint = None

## S3 region of the reports bucket.
# qa_reports_s3_region = None

## node_exporter textfile-collector directory the scheduled run writes tritonfleet_qa.prom into;
## None: monitoring_textfile_dir (the one the monitoring role's node exporter reads).
# qa_textfile_dir = None

## -------------------------------------------------------------------------------------------------
## monitoring (roles/monitoring.py): Prometheus exporters: node exporter, Neuron monitor, DCGM
## exporter
## -------------------------------------------------------------------------------------------------

## deploys/serve.py also runs this role (otherwise: deploys/monitoring.py, make monitoring).
# monitoring_with_serve = False

## Address the node exporter and the DCGM exporter listen on (0.0.0.0: every interface; allow the
## ports only from Prometheus in the security group, README "Monitoring").
# monitoring_bind_address = '0.0.0.0'

## node exporter textfile-collector directory (*.prom files; scheduled QA writes tritonfleet_qa.prom
## here).
# monitoring_textfile_dir = '/var/lib/prometheus/node-exporter'

## Run the node exporter.
# monitoring_node_exporter = True

## Node exporter port.
## bounds: >= 1, <= 65535
# monitoring_node_exporter_port = 9100

## Platforms without a node exporter package (Amazon Linux 2023): the release tarball
## (node_exporter-<v>.linux-<arch>.tar.gz) to install; None on those platforms is a preflight error.
# monitoring_node_exporter_url = None

## sha256 of that tarball (checked before use).
# monitoring_node_exporter_sha256 = None

## Neuron hosts: neuron-monitor | neuron-monitor-prometheus.py as
## tritonfleet-neuron-monitor.service.
# monitoring_neuron_exporter = True

## Port of neuron-monitor-prometheus.py (AWS's default 8000 is Triton's HTTP port; the script binds
## every interface, it has no address option).
## bounds: >= 1, <= 65535
# monitoring_neuron_exporter_port = 9010

## neuron-monitor report period.
# monitoring_neuron_period = '5s'

## neuron-monitor per-runtime metric groups (neuroncore_counters, memory_used,
## neuron_runtime_vcpu_usage, execution_stats).
# monitoring_neuron_runtime_metrics = ['neuroncore_counters',
#                                      'memory_used',
#                                      'neuron_runtime_vcpu_usage',
#                                      'execution_stats']

## neuron-monitor system metric groups (neuron_hw_counters, vcpu_usage, memory_info).
# monitoring_neuron_system_metrics = ['neuron_hw_counters', 'vcpu_usage', 'memory_info']

## GPU hosts: NVIDIA's dcgm-exporter container with the host's GPUs.
# monitoring_dcgm_exporter = True

## dcgm-exporter port.
## bounds: >= 1, <= 65535
# monitoring_dcgm_port = 9400

## dcgm-exporter image.
# monitoring_dcgm_image = 'nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04'

## "pull" (registry) or "archive" (docker load of dcgm_image_archive).
## allowed: 'pull', 'archive'
# monitoring_dcgm_image_source = 'pull'

## `docker save` tarball on the host (source "archive").
# monitoring_dcgm_image_archive = None

## DCP profiling metrics (tensor/SM activity): the container gets CAP_SYS_ADMIN, which it needs for
## them.
# monitoring_dcgm_profiling = False

## Address Prometheus reaches this host at (targets); None: ec2_private_ip when the inventory has
## it, else ssh_hostname, else the host name.
# monitoring_scrape_address = None

## fleet label of this host's scrape targets; None: the EC2 inventory's fleet, else the inventory's
## name.
# monitoring_fleet = None

## -------------------------------------------------------------------------------------------------
## lb (roles/lb.py): HAProxy in front of the Triton servers, on the hosts of the lb group
## -------------------------------------------------------------------------------------------------

## Port of the HTTP frontend (clients use the load balancer like one Triton server: 8000).
## bounds: >= 1, <= 65535
# lb_frontend_http_port = 8000

## Port of the gRPC (HTTP/2) frontend.
## bounds: >= 1, <= 65535
# lb_frontend_grpc_port = 8001

## Address the frontends and the Prometheus endpoint listen on (0.0.0.0: every interface).
# lb_bind_address = '0.0.0.0'

## Port of HAProxy's built-in Prometheus exporter (path /metrics, on lb_bind_address).
## bounds: >= 1, <= 65535
# lb_prometheus_port = 8405

## Health check interval per server (GET /v2/health/ready on its HTTP port, 200 expected).
## bounds: >= 100, <= 60000
# lb_check_interval_ms = 2000

## Failed checks in a row that take a server out.
## bounds: >= 1, <= 100
# lb_fall = 3

## Passed checks in a row that put a server back.
## bounds: >= 1, <= 100
# lb_rise = 2

## timeout connect (and timeout check).
## bounds: >= 100, <= 60000
# lb_connect_timeout_ms = 5000

## timeout client: a client's inactivity.
## bounds: >= 1, <= 86400
# lb_client_timeout_s = 300

## timeout server: a server's inactivity (an inference may take long).
## bounds: >= 1, <= 86400
# lb_server_timeout_s = 300

## hard-stop-after: how long the old workers of a reload may finish their connections.
## bounds: >= 1, <= 86400
# lb_hard_stop_after_s = 600

## Global maxconn: connections at once (HAProxy needs 2 file descriptors each; raise the unit's
## LimitNOFILE with it).
## bounds: >= 1, <= 1000000
# lb_maxconn = 4096

## HAProxy package version or pattern (e.g. 2.6.*); None: the platform's current package.
# lb_haproxy_version = None

## Triton hosts: the address the load balancers reach this host's servers at; None: a server's own
## bind address when it names one, else ec2_private_ip, else ssh_hostname, else the host name.
# lb_backend_address = None

## ELBv2 rollouts (rollout_lb: elbv2): this host's target id; None: ec2_instance_id for an instance
## target group, ec2_private_ip for an ip one.
# lb_target_id = None

## -------------------------------------------------------------------------------------------------
## rollback (roles/rollback.py): roll a host back to the point a rollout recorded before changing it
## -------------------------------------------------------------------------------------------------

## What to roll back to (set by `tritonfleet rollout` on a failed host; JSON on the command line).
# rollback_point = None

## -------------------------------------------------------------------------------------------------
## watchdog (roles/watchdog.py): the host watchdog: restarts, replaces or reports failing servers
## and hardware
## -------------------------------------------------------------------------------------------------

## Run the host watchdog (tritonfleet-watchdog.service) on the Triton hosts; off: stopped and
## removed.
# watchdog_enabled = False

## Seconds from one look at the host to the next (each condition's own time thresholds are in the
## policy).
## bounds: >= 5, <= 3600
# watchdog_interval_seconds = 30

## The watchdog policy: conditions -> chains of actions (report, restart, replace, free-cores) and
## the thresholds and bounds (tritonfleet/agent/watchpolicy.py); {} = the defaults.
# watchdog_policy = {}

## Load-balancer drain hook run before each restart: an absolute command and its arguments,
## {server}, {container} and {port} replaced; None: servers are restarted without a drain.
# watchdog_drain_command = None

## Seconds the drain hook may take.
## bounds: >= 1, <= 3600
# watchdog_drain_timeout_seconds = 60

## MemoryMax= of the service, in MiB.
## bounds: >= 64, <= 4096
# watchdog_memory_max_mib = 256

## node_exporter textfile directory for tritonfleet_watchdog.prom; None: monitoring_textfile_dir.
# watchdog_textfile_dir = None

## Auto Scaling endpoint URL for the replace action's SetInstanceHealth; None = AWS's.
# watchdog_asg_endpoint = None

## Region of the host's Auto Scaling group; None: the instance's own (from IMDS).
# watchdog_asg_region = None

## Publish each Triton server's queue time per request to CloudWatch every minute, dimension
## fleet=this (the metric `tritonfleet fleet autoscale` tracks); None: not published.
# watchdog_queue_time_fleet = None

## -------------------------------------------------------------------------------------------------
## rollout (roles/rollout.py): how a rollout drains hosts (ELBv2 or HAProxy) and judges a traffic
## canary
## -------------------------------------------------------------------------------------------------

## elbv2: the ELBv2 target group rollout_target_group (or --target-group; neither: no load balancer
## is told); haproxy: the HAProxy of the lb group's hosts (roles/lb.py), each server drained and put
## back over its Runtime API.
## allowed: 'elbv2', 'haproxy'
# rollout_lb = 'elbv2'

## elbv2: the target group's ARN (the rollout's --target-group wins).
# rollout_target_group = None

## Seconds a host may take to drain, and to be healthy again, in the load balancer (--lb-timeout).
## bounds: >= 10, <= 3600
# rollout_lb_timeout = 600

## Traffic canary: percent of the requests the canary hosts get while they bake (--canary-weight);
## None: no traffic canary.
## bounds: >= 0, <= 100
# rollout_canary_weight = None

## Traffic canary: seconds it bakes before the gates judge it (--bake; None: 120).
## bounds: > 0, <= 86400
# rollout_bake = None

## Traffic canary: the Prometheus the gates ask, http(s)://host:port (--prometheus).
# rollout_prometheus = None

## Gate: the canary's error ratio above which it is rolled back (absolute; 0.01 = 1 % of its
## requests).
## bounds: >= 0, <= 1
# rollout_max_error_ratio = 0.01

## Gate: the canary's latency per request above this times the other hosts' rolls it back.
## bounds: > 0
# rollout_max_latency_ratio = 1.5

## -------------------------------------------------------------------------------------------------
## Renamed or removed keys: a host that still sets one fails preflight
## -------------------------------------------------------------------------------------------------

## models_agent_python: renamed to agent_python
