package mcpwire

// A production slot's systemd status text (sd_notify STATUS=), which mcpctl
// reads over D-Bus to tell what each of the two slots does during a
// cutover.
const (
	// SlotStandby: serving only its own loopback listener, not accepting
	// on the shared socket.
	SlotStandby = "standby: serving its own listener only"
	// SlotAccepting: accepting on the shared socket.
	SlotAccepting = "accepting on the shared socket"
	// SlotHandingOff: stopped accepting (SIGUSR2), finishing what it
	// accepted, then parking.
	SlotHandingOff = "handing off: finishing accepted calls"
	// SlotParked: serving nothing new, able to accept on the shared socket
	// again at once (SIGUSR1); it exits when stopped.
	SlotParked = "parked: able to take over at once"
	// SlotParkedFinishing: parked as SlotParked (serving nothing new, able
	// to accept again at once), but calls it accepted before the handoff
	// still run past its drain: stopping it now would cut them. It says
	// SlotParked once the last of them is answered.
	SlotParkedFinishing = "parked: finishing calls accepted before the handoff"
)
