# agentsandbox serve on every Nomad client of the class agentsandbox: a
# system job with raw_exec (the jail needs root on the host: namespaces,
# mounts, loop devices, cgroups, nftables; docs/isolation.md). UNTESTED
# here: Nomad cannot be built on the machines this project is tested on;
# only its HCL syntax is checked (deploy/kubernetes/validate). docs/kubernetes.md.
#
# raw_exec must be enabled on the clients (plugin "raw_exec" { config {
# enabled = true } }), and agentsandbox and agentsandbox-guest installed
# side by side in /usr/local/bin (make build; scripts/setup.sh for the host).
job "agentsandbox-serve" {
  type = "system"

  constraint {
    attribute = "${node.class}"
    value     = "agentsandbox"
  }

  group "serve" {
    network {
      port "http" {
        static = 8888
      }
    }

    task "serve" {
      driver = "raw_exec"

      config {
        command = "/usr/local/bin/agentsandbox"
        args = [
          "serve",
          "--listen", "${NOMAD_ADDR_http}",
          "--token-file", "/etc/agentsandbox/token",
          "--state-dir", "/var/lib/agentsandbox",
          "--store", "${AGENTSANDBOX_STORE}",
        ]
      }

      # The store's URL and credentials, from Nomad Variables at
      # nomad/jobs/agentsandbox-serve (store, access_key, secret_key).
      template {
        destination = "${NOMAD_SECRETS_DIR}/store.env"
        env         = true
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/agentsandbox-serve" }}
          AGENTSANDBOX_STORE={{ .store }}
          AWS_ACCESS_KEY_ID={{ .access_key }}
          AWS_SECRET_ACCESS_KEY={{ .secret_key }}
          {{ end }}
        EOT
      }

      # SIGTERM: serve drains, stops every sandbox and writes their records.
      kill_signal  = "SIGTERM"
      kill_timeout = "60s"

      resources {
        cpu    = 2000
        memory = 4096
      }
    }
  }
}
