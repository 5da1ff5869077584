# Test flake for vmrunner/nixbuild: no nixpkgs, no network. Its one input is
# a local path flake (tools) holding a static busybox, so that the lock file
# pins something real. @TOOLS@ and @NONCE@ are filled in by the test; the
# nonce makes every test run build afresh.
{
  description = "agentsandbox nixbuild test flake";
  inputs.tools.url = "path:@TOOLS@";
  outputs = { self, tools }:
    let
      mk = name: script: derivation {
        inherit name;
        system = "x86_64-linux";
        builder = "${tools.busybox}/sh";
        args = [ "-c" script ];
        PATH = "${tools.busybox}";
        NONCE = "@NONCE@";
      };
    in {
      packages.x86_64-linux = rec {
        hello = mk "hello" "echo hello from ${tools.message} > $out";
        tree = mk "tree" ''
          mkdir -p $out/bin $out/empty
          echo ${hello} > $out/ref
          ln -s ${hello} $out/hello
          printf '#!/bin/sh\necho hi\n' > $out/bin/hi
          chmod +x $out/bin/hi
        '';
        broken = mk "broken" "echo this step is broken >&2; exit 7";
      };
    };
}
