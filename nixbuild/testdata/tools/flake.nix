# The test flake's input: busybox (bb/busybox, copied in by the test, with
# bb/sh -> busybox) and a message the pinning test changes.
{
  outputs = { self }: {
    busybox = ./bb;
    message = "@MESSAGE@";
  };
}
