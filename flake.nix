# The agentsandbox project flake: the CLI, the static guest agent, and the
# NixOS guest module that generated workflow flakes import.
#
#   nix build .#agentsandbox          the CLI (also .#default)
#   nix build .#agentsandbox-guest    the guest agent, static (CGO_ENABLED=0)
#   nix run . -- apply examples/hello.yaml
#   nix develop                       Go, Nix and qemu for hacking on it
#
# nixpkgs is pinned by flake.lock (create it with `nix flake lock` and commit
# it). vendorHash is the NAR hash of `go mod vendor`; the tier-nix test
# TestProjectFlakeVendorHash (package nixgen) recomputes it and says how to
# update it when go.mod or the imports change.
{
  description = "agentsandbox: run declarative workflows in isolated, reproducible, recorded sandboxes";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs = { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAllSystems = f: lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});

      version = "0.1.0-${self.shortRev or "dirty"}";
      vendorHash = "sha256-O4SzaVzW7vMddJIdSr942uyHDMlr/MOwddka8DpSpLo=";
      src = lib.cleanSource ./.;

      goPackage = pkgs: { pname, subPackages, description }:
        pkgs.buildGoModule {
          inherit pname version src vendorHash subPackages;
          env.CGO_ENABLED = 0;
          ldflags = [ "-s" "-w" "-X main.version=${version}" ];
          # The test suite needs Nix, root and qemu (tiers in internal/testtier);
          # CI runs it outside the sandbox.
          doCheck = false;
          meta = {
            inherit description;
            mainProgram = pname;
            platforms = lib.platforms.linux;
          };
        };
    in
    {
      packages = forAllSystems (pkgs: rec {
        agentsandbox = goPackage pkgs {
          pname = "agentsandbox";
          # The agent ships beside the CLI in $out/bin: it is every jail's
          # init, and the CLI looks for it next to itself.
          subPackages = [ "cmd/agentsandbox" "cmd/agentsandbox-guest" ];
          description = "Run declarative workflows in isolated, reproducible, recorded sandboxes";
        };
        agentsandbox-guest = goPackage pkgs {
          pname = "agentsandbox-guest";
          subPackages = [ "cmd/agentsandbox-guest" ];
          description = "The agentsandbox guest agent: runs one job and reports its result";
        };
        default = agentsandbox;
      });

      # Imported by every generated workflow flake next to microvm.nix's module.
      nixosModules.guest = { lib, pkgs, ... }: {
        imports = [ ./modules/guest.nix ];
        agentsandbox.guest.package =
          lib.mkDefault self.packages.${pkgs.stdenv.hostPlatform.system}.agentsandbox-guest;
      };
      nixosModules.default = self.nixosModules.guest;

      apps = forAllSystems (pkgs: {
        default = {
          type = "app";
          program = lib.getExe self.packages.${pkgs.stdenv.hostPlatform.system}.agentsandbox;
        };
      });

      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          packages = [
            pkgs.go
            pkgs.gopls
            pkgs.nix
            pkgs.qemu
            pkgs.busybox
          ];
        };
      });
    };
}
