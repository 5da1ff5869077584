# The test flake's input: busybox (bb/busybox, copied in by the test, with
# bb/sh -> busybox) and a message the pinning test changes. Like nixpkgs'
# lib since 2025-08 (lib/minver.nix, then lib/minfeatures.nix), it refuses
# a Nix older than 2.18, so every build of the test flake shows that the
# tests run with a Nix today's nixpkgs accepts.
{
  outputs = { self }:
    let
      minVersion = "2.18";
    in
    assert builtins.compareVersions builtins.nixVersion minVersion >= 0
      || throw "this flake needs Nix ${minVersion} or later, as nixpkgs does since 2025-08; this is Nix ${builtins.nixVersion}";
    {
      busybox = ./bb;
      message = "@MESSAGE@";
    };
}
