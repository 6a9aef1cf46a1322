package node

// Version is the overworld release; protocol IDs carry their own versions.
const Version = "0.1.0"
