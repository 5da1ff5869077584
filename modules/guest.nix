# agentsandbox guest: runs one job in a microvm.nix guest and powers the VM
# off when the job is over, whatever happens. Options are documented in
# docs/modules.md. The project flake exports this file as
# nixosModules.guest and sets agentsandbox.guest.package from its own
# agentsandbox-guest package.
{ config, lib, pkgs, ... }:
let
  cfg = config.agentsandbox.guest;
  inherit (lib) mkOption mkEnableOption mkIf mkDefault mkForce types;

  # How this hypervisor's process is ended from inside the guest, as in
  # microvm.nix's own startup-shutdown check: qemu runs with -no-reboot and
  # firecracker exits on reboot; cloud-hypervisor exits on power-off.
  defaultExitAction =
    if (config.microvm.hypervisor or "qemu") == "cloud-hypervisor" then "poweroff" else "reboot";

  # Ends the VM without waiting for anything that might hang.
  exitCommand = "${config.systemd.package}/bin/systemctl --no-block --force ${cfg.exitAction}";

  allowType = types.submodule {
    options = {
      host = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "pypi.org";
        description = ''
          A DNS name, a "*.domain" wildcard, or "*" for anywhere. The guest
          cannot know which addresses a name has when its image is built, so
          a host rule opens its port to every address (and DNS to the
          gateway); the host-side filter of the step's network namespace is
          what holds the traffic to that name.
        '';
      };
      cidr = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "10.0.0.0/8";
        description = "An IPv4 or IPv6 prefix (a single address is /32 or /128).";
      };
      port = mkOption {
        type = types.nullOr types.port;
        default = null;
        description = "TCP and UDP destination port; null for every port.";
      };
    };
  };

  # One nftables rule per allow entry.
  ruleFor = r:
    let
      dest =
        if r.cidr != null then
          (if lib.hasInfix ":" r.cidr then "ip6" else "ip") + " daddr ${r.cidr} "
        else "";
      port = if r.port != null then "meta l4proto { tcp, udp } th dport ${toString r.port} " else "";
    in
    "${dest}${port}accept";

  hasHostRules = lib.any (r: r.host != null) cfg.network.allow;

  # The step's name from job.json becomes the hostname, as the namespace
  # jail does: the image is shared by every step of one environment, so it
  # cannot carry the name. Only a DNS label is taken (step names are);
  # anything else leaves the default hostname, and the agent reports a bad
  # job.json itself.
  setHostname = pkgs.writeShellScript "agentsandbox-hostname" ''
    step=$(${pkgs.jq}/bin/jq -er '.step | strings' ${lib.escapeShellArg "${cfg.controlMount}/job.json"}) || exit 0
    if [[ $step =~ ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ ]]; then
      printf '%s' "$step" > /proc/sys/kernel/hostname
    fi
  '';
in
{
  options.agentsandbox.guest = {
    enable = mkEnableOption "the agentsandbox guest agent, which runs the job found in the control share";

    package = mkOption {
      type = types.package;
      description = "The package providing bin/agentsandbox-guest (the project flake sets it).";
    };

    step = mkOption {
      type = types.nullOr types.str;
      default = null;
      description = ''
        Name of the workflow step this image runs, for the job unit's
        description only. Generated flakes leave it null: one image serves
        every step of an environment, and the step's name arrives at run
        time in job.json, which also sets the guest's hostname.
      '';
    };

    controlMount = mkOption {
      type = types.str;
      default = "/run/agentsandbox";
      description = ''
        Where the control share (job.json in, result.json and logs out) is
        mounted. Must match guest.ControlMount in the Go code.
      '';
    };

    workspaceMount = mkOption {
      type = types.str;
      default = "/workspace";
      description = "Where the workspace share is mounted. Must match guest.WorkspaceMount.";
    };

    exitAction = mkOption {
      type = types.enum [ "poweroff" "reboot" ];
      default = defaultExitAction;
      defaultText = lib.literalExpression ''"poweroff" with cloud-hypervisor, else "reboot"'';
      description = ''
        What the guest does to end the VM once the job is over, failed, or
        the boot went wrong. Both end the hypervisor process: qemu runs with
        -no-reboot and firecracker exits on a reboot.
      '';
    };

    network = {
      enable = mkOption {
        type = types.bool;
        default = false;
        description = "Whether the step has a network interface (a tap on the host).";
      };
      mac = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = "MAC address of the guest interface to configure (it is matched by this address).";
      };
      address = mkOption {
        type = types.str;
        default = "198.18.0.2/24";
        description = "The guest's address and prefix length on the tap link.";
      };
      gateway = mkOption {
        type = types.str;
        default = "198.18.0.1";
        description = "The host end of the tap link: default route and DNS server.";
      };
      allow = mkOption {
        type = types.listOf allowType;
        default = [ ];
        description = ''
          Egress the guest firewall lets out; everything else is dropped
          (default deny). Loopback and replies to allowed traffic always pass.
        '';
      };
    };
  };

  config = mkIf cfg.enable {
    assertions = [
      {
        assertion = !cfg.network.enable || cfg.network.mac != null;
        message = "agentsandbox.guest.network.mac must be set when the network is enabled";
      }
      {
        assertion = lib.all (r: (r.host == null) != (r.cidr == null)) cfg.network.allow;
        message = "every agentsandbox.guest.network.allow entry sets exactly one of host and cidr";
      }
    ];

    system.stateVersion = mkDefault lib.trivial.release;
    # Until job.json names the step (see setHostname).
    networking.hostName = mkDefault "agentsandbox";

    # The job service: one shot, then the VM ends whatever the outcome.
    systemd.services.agentsandbox-guest = {
      description = "agentsandbox job" + lib.optionalString (cfg.step != null) " of step ${cfg.step}";
      wantedBy = [ "multi-user.target" ];
      after = [ "local-fs.target" "network.target" ];
      unitConfig.RequiresMountsFor = [ cfg.controlMount cfg.workspaceMount ];
      # Also covers a start that fails before ExecStart runs.
      onFailure = [ "agentsandbox-exit.service" ];
      serviceConfig = {
        Type = "oneshot";
        # "-": a hostname that cannot be set does not stop the job.
        ExecStartPre = "-${setHostname}";
        ExecStart = "${cfg.package}/bin/agentsandbox-guest ${lib.escapeShellArg cfg.controlMount}";
        # Runs after success, failure and timeout alike.
        ExecStopPost = exitCommand;
        TimeoutStartSec = "infinity";
        StandardOutput = "journal+console";
        StandardError = "journal+console";
      };
    };

    systemd.services.agentsandbox-exit = {
      description = "End the agentsandbox VM";
      unitConfig.DefaultDependencies = false;
      serviceConfig = {
        Type = "oneshot";
        ExecStart = exitCommand;
      };
    };

    # A failed mount or unit drops systemd into emergency or rescue mode,
    # where the VM would wait forever (microvm.nix issue 114): end it instead.
    systemd.services.emergency.serviceConfig.ExecStart = mkForce [ "" exitCommand ];
    systemd.services.rescue.serviceConfig.ExecStart = mkForce [ "" exitCommand ];
    # A kernel panic reboots at once, which ends the hypervisor too. The
    # microvm.nix runners already pass reboot=t (qemu, cloud-hypervisor) or
    # reboot=k (firecracker), which this must not override.
    boot.kernelParams = [ "panic=-1" ];

    # Nothing to log into: no ssh, no getty but the serial console the
    # runner connects to stdout.
    services.openssh.enable = mkForce false;
    services.getty.autologinUser = mkForce null;
    systemd.services."getty@".enable = false;
    systemd.services."autovt@".enable = false;
    documentation.enable = false;
    documentation.nixos.enable = false;

    # Network: only what the step was allowed.
    networking.useDHCP = false;
    networking.useNetworkd = true;
    systemd.network.enable = true;
    systemd.network.networks."10-agentsandbox" = mkIf cfg.network.enable {
      matchConfig.MACAddress = cfg.network.mac;
      address = [ cfg.network.address ];
      routes = [ { Gateway = cfg.network.gateway; } ];
      networkConfig.DNS = [ cfg.network.gateway ];
    };
    networking.firewall.enable = true; # inbound: nothing is open
    networking.nftables.enable = true;
    networking.nftables.tables.agentsandbox-egress = {
      family = "inet";
      content = ''
        chain output {
          type filter hook output priority filter; policy drop;
          oifname "lo" accept
          ct state established,related accept
          ${lib.optionalString (cfg.network.enable && hasHostRules) ''
            ip daddr ${cfg.network.gateway} meta l4proto { tcp, udp } th dport 53 accept
          ''}
          ${lib.concatMapStringsSep "\n  " ruleFor (lib.optionals cfg.network.enable cfg.network.allow)}
        }
      '';
    };
  };
}
