# Checks the NixOS modules agentsandbox generates against microvm.nix's real
# option declarations and assertions, with nixpkgs' own module system, and
# without nixpkgs' packages or NixOS: see scripts/check-microvm-options.sh,
# which is how to run it, and docs/nixgen.md.
#
#   microvmSrc  a checkout of microvm.nix (nixos-modules/microvm/...)
#   nixpkgsLib  a checkout of nixpkgs or of nixpkgs.lib (lib/default.nix)
#   guestModule this project's modules/guest.nix
#   dirs        directories `agentsandbox render` wrote
#
# For every envs/*.nix of every directory, alone and extended with that
# directory's tcg.nix, it evaluates lib.evalModules with:
#   - microvm.nix's declaration modules: nixos-modules/microvm/options.nix
#     (all its options, its removed-option module and its own config) and
#     nixos-modules/microvm/asserts.nix (its assertions and warnings);
#   - this project's modules/guest.nix, so agentsandbox.guest.* is checked
#     against its own declarations too;
#   - the stub below: the few NixOS options those modules read or set,
#     declared loosely, since NixOS itself is not evaluated;
#   - the generated module.
# It forces every microvm option a generated module sets and every
# agentsandbox.guest option, through their types, and config.assertions
# and config.warnings. An undeclared option, a value of the wrong type or
# a failed assertion ends the evaluation with an error; otherwise the
# result lists what was checked.
{ microvmSrc, nixpkgsLib, guestModule, dirs }:
let
  lib = import (nixpkgsLib + "/lib");
  inherit (lib) mkOption types;

  # A stand-in for a package: enough for types.package.
  drv = name: {
    type = "derivation";
    inherit name;
    outPath = "/nix/store/00000000000000000000000000000000-${name}";
    drvPath = "/nix/store/00000000000000000000000000000000-${name}.drv";
  };

  # The packages the modules name, and what microvm.nix's defaults read of
  # pkgs. A package a generated module lists (environment.systemPackages)
  # is never forced, so any name will do.
  pkgs = {
    _type = "pkgs";
    system = "x86_64-linux";
    stdenv.hostPlatform = { system = "x86_64-linux"; isLinux = true; isDarwin = false; };
    buildPackages = pkgs;
    qemu_kvm = drv "qemu-host-cpu-only";
    qemu = drv "qemu";
    jq = drv "jq";
    writeShellScript = name: _: drv name;
  };

  # NixOS options that microvm.nix's declarations and asserts, and the
  # guest module, read or set. Loosely typed: this checks microvm.nix's and
  # agentsandbox's options, not NixOS's.
  nixosStub = {
    options = {
      assertions = mkOption { type = types.listOf types.unspecified; default = [ ]; };
      warnings = mkOption { type = types.listOf types.str; default = [ ]; };
      networking = mkOption { type = types.submodule { freeformType = types.attrsOf types.anything; options.hostName = mkOption { type = types.str; default = "nixos"; }; }; default = { }; };
      nix.optimise.automatic = mkOption { type = types.bool; default = false; };
      boot = mkOption { type = types.attrsOf types.anything; default = { }; };
      system = mkOption { type = types.attrsOf types.anything; default = { }; };
      systemd = mkOption { type = types.attrsOf types.anything; default = { }; };
      services = mkOption { type = types.attrsOf types.anything; default = { }; };
      documentation = mkOption { type = types.attrsOf types.anything; default = { }; };
      environment.systemPackages = mkOption { type = types.listOf types.raw; default = [ ]; };
    };
    config = {
      boot.kernelPackages.kernel.version = "6.12.0";
      system.build = { toplevel = drv "nixos-system"; initialRamdisk = drv "initrd"; };
      system.boot.loader.initrdFile = "initrd";
      systemd.package = drv "systemd";
    };
  };

  microvmModules = [
    (microvmSrc + "/nixos-modules/microvm/options.nix")
    (microvmSrc + "/nixos-modules/microvm/asserts.nix")
  ];

  # The microvm options the generated modules may set, forced through
  # their types. Shares are forced whole; of interfaces and volumes, the
  # fields the generator sets (a tap has no macvtap.link to force).
  forced = cfg: {
    inherit (cfg) hypervisor vcpu mem socket shares cpu registerClosure;
    interfaces = map (i: { inherit (i) type id mac; }) cfg.interfaces;
    volumes = map (v: { inherit (v) image mountPoint label size autoCreate fsType; }) cfg.volumes;
    qemu = { inherit (cfg.qemu) machineOpts package extraArgs; };
  };

  check = name: modules:
    let
      eval = lib.evalModules {
        specialArgs = { inherit pkgs; };
        modules = microvmModules ++ [ guestModule nixosStub { agentsandbox.guest.package = drv "agentsandbox-guest"; } ] ++ modules;
      };
      cfg = eval.config;
      failed = map (a: a.message) (lib.filter (a: !a.assertion) cfg.assertions);
      result = {
        microvm = forced cfg.microvm;
        guest = cfg.agentsandbox.guest;
        assertions = builtins.length cfg.assertions;
        warnings = cfg.warnings;
      };
    in
    if failed != [ ] then throw "${name}: failed assertions:\n${lib.concatStringsSep "\n" failed}"
    else builtins.deepSeq result result;

  checkDir = dir:
    let
      envs = lib.filter (n: lib.hasSuffix ".nix" n) (builtins.attrNames (builtins.readDir (dir + "/envs")));
      one = file: {
        name = lib.removeSuffix ".nix" file;
        value = {
          kvm = check "${toString dir}/envs/${file}" [ (dir + "/envs/${file}") ];
          tcg = check "${toString dir}/envs/${file} + tcg.nix" [ (dir + "/envs/${file}") (dir + "/tcg.nix") ];
        };
      };
    in
    builtins.listToAttrs (map one envs);
in
builtins.listToAttrs (map (d: { name = baseNameOf (toString d); value = checkDir d; }) dirs)
