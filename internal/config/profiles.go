package config

import (
	"fmt"
	"strings"
)

// A profile presets partner settings for the interoperability quirks of
// one AS2 product, as documented in other AS2 implementations' guides and
// trackers. A partner entry names one with "profile: <name>"; the profile
// fills in the keys the entry leaves out, and keys the entry sets always
// win. Every setting here is backed by the sources listed with it; a
// belief without a source does not go in. Where edihub's behaviour already
// avoids a quirk, the profile pins the setting that does so and says why.
type profile struct {
	name    string
	summary string
	// sources are the documents that describe the quirks.
	sources []string
	// settings are partner keys and their values, written as in YAML.
	settings []profileSetting
	// requires are keys the entry must set itself: the product insists
	// on something, but the sources name no value to preset.
	requires []profileRequirement
}

type profileSetting struct{ key, value string }

type profileRequirement struct{ key, why, fix string }

// OpenAS2's guide keeps a table of settings other AS2 products need
// ("Partner AS2 Compatibility Settings") and the troubleshooting sections
// it refers to.
const openAS2Guide = "https://github.com/OpenAS2/OpenAs2App/blob/master/docs/OpenAS2HowTo.odt"

// profiles is the preset table, in documentation order.
var profiles = []profile{
	{
		// OpenAS2's guide, "CMS Algorithm Protection": "Currently known
		// systems that do not support this are IBM Sterling Integrator";
		// its compatibility table sets remove_cms_algorithm_protection_attrib
		// for IBM Sterling and IBM DataPower, and phase2 (as2-lib) added
		// the same partnership attribute for a Sterling partner (issue
		// 137). edihub never adds the RFC 6211 attribute to what it signs,
		// so there is nothing to set; outbox tests check the signatures.
		name: "sterling",
		summary: "IBM Sterling B2B Integrator (also IBM DataPower B2B): rejects signatures that carry the RFC 6211 " +
			"CMS algorithm protection attribute. edihub never adds it, so the profile changes no setting.",
		sources: []string{
			openAS2Guide + " (sections \"CMS Algorithm Protection\" and \"Partner AS2 Compatibility Settings\")",
			"https://github.com/phax/phase2/issues/137",
		},
	},
	{
		// BizTalk's "Known Issues with AS2 Processing", "AS2 Message Size
		// Limitation": encrypted messages must be smaller than 96 MB, and
		// compression, applied before encryption, is the workaround. Azure
		// Logic Apps limits AS2 messages to 100 MB (AS2 v2; 25 MB for v1)
		// for encoding and decoding.
		name: "biztalk",
		summary: "Microsoft BizTalk Server and Azure Logic Apps: BizTalk's AS2 decoder refuses encrypted messages of " +
			"96 MB or more, Logic Apps AS2 messages over 100 MB (v1: 25 MB); compression, applied before " +
			"encryption, is BizTalk's documented way under the limit.",
		sources: []string{
			"https://learn.microsoft.com/en-us/biztalk/core/known-issues-with-as2-processing (\"AS2 Message Size Limitation\")",
			"https://learn.microsoft.com/en-us/azure/logic-apps/logic-apps-limits-and-config#b2b-protocol-limits",
		},
		settings: []profileSetting{{"compress", "true"}},
	},
	{
		// OpenAS2's compatibility table: "Seeburger (older versions)" need
		// rename_digest_to_old_name, which makes OpenAS2 write the micalg
		// parameter with RFC 3851 names (BouncyCastle's RFC3851_MICALGS);
		// OpenAS2 issue 104 is the report that it "solved a communication
		// problem with a partner (Seeburger, older version)".
		name: "seeburger",
		summary: "SEEBURGER Business Integration Suite, older versions: expects the pre-RFC 5751 micalg names " +
			"(sha1, sha256) in the Content-Type of signed messages.",
		sources: []string{
			openAS2Guide + " (section \"Partner AS2 Compatibility Settings\")",
			"https://github.com/OpenAS2/OpenAs2App/issues/104",
		},
		settings: []profileSetting{{"micalg_names", MICAlgNamesRFC3851}},
	},
	{
		// OpenAS2's guide, "Canonicalization For MIC Algorithm": OpenAS2
		// before 1.3.7 did not canonicalize a MIME part whose transfer
		// encoding is not binary when computing the MIC; "Binary
		// Encoding": if a non-binary transfer encoding fails
		// authentication, use binary (also its shipped partnerships.xml
		// default). OpenAS2 computes the MIC of an unsigned, unencrypted
		// message over the content alone (AS2SenderModule calls
		// calcAndStoreMic with includeHeaders = sign || encrypt, and
		// AS2ReceiverHandler likewise). Both are edihub's defaults too;
		// the profile pins them.
		name: "openas2",
		summary: "OpenAS2: before 1.3.7 it computed the MIC of a non-binary MIME part without canonicalizing it, " +
			"and its guide answers MIC and signature failures with binary transfer encoding; it computes the MIC of " +
			"unsigned, unencrypted messages over the content without header fields. edihub's defaults match; the " +
			"profile pins them.",
		sources: []string{
			openAS2Guide + " (sections \"Canonicalization For MIC Algorithm\" and \"Binary Encoding\")",
			"https://github.com/OpenAS2/OpenAs2App/blob/5b00aa96749fd866e4f388aa4f864225f898c125/Server/src/main/java/org/openas2/processor/sender/AS2SenderModule.java (calcAndStoreMic)",
		},
		settings: []profileSetting{{"transfer_encoding", TransferEncodingBinary}, {"mic_include_headers", "false"}},
	},
	{
		// OpenAS2's compatibility table sets prevent_canonicalization_for_mic
		// for mendelson: mendelson digests the MIME part as transferred,
		// without converting line ends to CRLF. With binary transfer
		// encoding neither side canonicalizes. In OpenAS2 issue 120 a
		// mendelson receiver refused a message sent with an HTTP
		// Content-Transfer-Encoding: base64 header ("The defined content
		// transfer encoding "base64" is unknown").
		name: "mendelson",
		summary: "mendelson AS2: computes the MIC over the MIME part as transferred, without converting line ends to " +
			"CRLF, and a mendelson receiver refused a message with an HTTP Content-Transfer-Encoding of base64. " +
			"Binary transfer encoding (edihub's default) avoids both; the profile pins it.",
		sources: []string{
			openAS2Guide + " (section \"Partner AS2 Compatibility Settings\")",
			"https://github.com/OpenAS2/OpenAs2App/issues/120",
		},
		settings: []profileSetting{{"transfer_encoding", TransferEncodingBinary}},
	},
	{
		// A Vendor Central set-up guide: "Amazon defines secure as
		// digitally signed and encrypted". OpenAS2's compatibility table
		// for Amazon: prevent_canonicalization_for_mic (see mendelson),
		// and "Remove compression attribute as this has been reported to
		// solve issues"; it also reports a 4096-bit certificate is needed,
		// which is the station's key, not a partner setting. No source
		// found names Amazon's algorithms, so sign and encrypt are
		// required rather than preset.
		name: "amazon-vendor-central",
		summary: "Amazon Vendor Central (retail EDI): Amazon requires signed and encrypted messages; OpenAS2's " +
			"compatibility notes report that leaving out compression and MIC canonicalization solved problems, and " +
			"that Amazon needs a 4096-bit certificate (the station's key).",
		sources: []string{
			"https://wiki.amazowl.com/sop/vendor-central/setting-up-AS2",
			openAS2Guide + " (section \"Partner AS2 Compatibility Settings\")",
		},
		settings: []profileSetting{{"compress", "false"}, {"transfer_encoding", TransferEncodingBinary}},
		requires: []profileRequirement{
			{"sign", "Amazon requires signed messages", "set sign to the digest Amazon's AS2 set-up names, like sha-256"},
			{"encrypt", "Amazon requires encrypted messages", "set encrypt to the cipher Amazon's AS2 set-up names, like aes256-cbc"},
		},
	},
}

// profileKeys are the partner keys a profile may set: how to read each
// from a raw entry ("" when the entry leaves it at its zero value) and
// how to set it.
var profileKeys = map[string]struct {
	get func(*rawPartner) string
	set func(*rawPartner, string)
}{
	"sign":                {func(r *rawPartner) string { return r.Sign }, func(r *rawPartner, v string) { r.Sign = v }},
	"encrypt":             {func(r *rawPartner) string { return r.Encrypt }, func(r *rawPartner, v string) { r.Encrypt = v }},
	"compress":            {func(r *rawPartner) string { return boolKey(r.Compress) }, func(r *rawPartner, v string) { r.Compress = v == "true" }},
	"compress_order":      {func(r *rawPartner) string { return r.CompressOrder }, func(r *rawPartner, v string) { r.CompressOrder = v }},
	"mdn":                 {func(r *rawPartner) string { return r.MDN }, func(r *rawPartner, v string) { r.MDN = v }},
	"mdn_signed":          {func(r *rawPartner) string { return boolKey(r.MDNSigned) }, func(r *rawPartner, v string) { r.MDNSigned = v == "true" }},
	"mdn_micalg":          {func(r *rawPartner) string { return r.MDNMICAlg }, func(r *rawPartner, v string) { r.MDNMICAlg = v }},
	"key_encryption":      {func(r *rawPartner) string { return r.KeyEncryption }, func(r *rawPartner, v string) { r.KeyEncryption = v }},
	"transfer_encoding":   {func(r *rawPartner) string { return r.TransferEncoding }, func(r *rawPartner, v string) { r.TransferEncoding = v }},
	"chunked":             {func(r *rawPartner) string { return boolKey(r.Chunked) }, func(r *rawPartner, v string) { r.Chunked = v == "true" }},
	"mic_include_headers": {func(r *rawPartner) string { return boolKey(r.MICIncludeHeaders) }, func(r *rawPartner, v string) { r.MICIncludeHeaders = v == "true" }},
	"micalg_names":        {func(r *rawPartner) string { return r.MICAlgNames }, func(r *rawPartner, v string) { r.MICAlgNames = v }},
}

func boolKey(b bool) string {
	if b {
		return "true"
	}
	return ""
}

// applyProfile fills in the keys the entry's profile sets and the entry
// leaves out, checks the keys the profile requires, and returns the
// profile's name ("" for none). It runs before the entry's sections are
// read, so every later check sees the profile's values as if written.
func (p *parser) applyProfile(field string, raw *rawPartner) (string, error) {
	if strings.TrimSpace(raw.Profile) == "" {
		return "", nil
	}
	pr, ok := lookupProfile(raw.Profile)
	if !ok {
		return "", p.fail(field+".profile", fmt.Sprintf("unknown profile %q", raw.Profile),
			"use one of "+strings.Join(profileNames(), ", ")+", or remove profile")
	}
	if p.profileApplied {
		// A stored spec holds the profile's settings already, and the
		// keys the entry set itself over them.
		return pr.name, nil
	}
	for _, s := range pr.settings {
		if k := profileKeys[s.key]; !p.partnerSets(field, s.key, raw) {
			k.set(raw, s.value)
		}
	}
	for _, r := range pr.requires {
		if !p.partnerSets(field, r.key, raw) {
			return "", p.fail(field+"."+r.key, fmt.Sprintf("missing: profile %s needs it (%s)", pr.name, r.why),
				r.fix+"; or remove profile")
		}
	}
	return pr.name, nil
}

// partnerSets reports whether the entry at field sets key itself: it
// appears in the file, or its value is not the zero value (a key merged
// in with "<<" is not in the line index).
func (p *parser) partnerSets(field, key string, raw *rawPartner) bool {
	if p.ix != nil {
		if _, ok := p.ix.lines[field+"."+key]; ok {
			return true
		}
	}
	return profileKeys[key].get(raw) != ""
}

func lookupProfile(name string) (*profile, bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	for i := range profiles {
		if profiles[i].name == name {
			return &profiles[i], true
		}
	}
	return nil, false
}

func profileNames() []string {
	names := make([]string, len(profiles))
	for i, pr := range profiles {
		names[i] = pr.name
	}
	return names
}

// ProfileInfo describes one partner profile, for the CLI and the API.
type ProfileInfo struct {
	// Name is what a partner entry writes as "profile: <name>".
	Name string
	// Summary names the product and the quirks the profile works around.
	Summary string
	// Sources are the documents that describe the quirks.
	Sources []string
	// Settings are the partner keys the profile sets and their values as
	// written in YAML. Keys the entry sets itself win.
	Settings map[string]string
	// Requires are the partner keys an entry with this profile must set
	// itself.
	Requires []string
}

// Profiles lists the partner profiles in documentation order. The result
// is the caller's to keep and modify.
func Profiles() []ProfileInfo {
	out := make([]ProfileInfo, 0, len(profiles))
	for _, pr := range profiles {
		info := ProfileInfo{Name: pr.name, Summary: pr.summary, Sources: append([]string(nil), pr.sources...), Settings: map[string]string{}}
		for _, s := range pr.settings {
			info.Settings[s.key] = s.value
		}
		for _, r := range pr.requires {
			info.Requires = append(info.Requires, r.key)
		}
		out = append(out, info)
	}
	return out
}
