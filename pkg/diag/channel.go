package diag

var channelNames = [...]string{
	ChannelUnknown:                    "unknown",
	ChannelBCCHBCH:                    "BCCH-BCH",
	ChannelBCCHDLSCH:                  "BCCH-DL-SCH",
	ChannelPCCH:                       "PCCH",
	ChannelDLCCCH:                     "DL-CCCH",
	ChannelDLDCCH:                     "DL-DCCH",
	ChannelULCCCH:                     "UL-CCCH",
	ChannelULDCCH:                     "UL-DCCH",
	ChannelRRCReconfiguration:         "RRCReconfiguration",
	ChannelRRCReconfigurationComplete: "RRCReconfigurationComplete",
}

// String names the channel as the RRC specifications do.
func (c RRCChannel) String() string {
	if int(c) < len(channelNames) {
		return channelNames[c]
	}
	return "unknown"
}
