package units

// GoMemLimit exposes goMemLimit to the external tests.
var GoMemLimit = goMemLimit
