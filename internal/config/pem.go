package config

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
)

// problem is a key or certificate defect, phrased for an *Error. Messages
// name PEM block types and parser errors, never key bytes.
type problem struct {
	msg, fix string
	err      error
}

const needRSA = "AS2 interoperability here needs RSA"

// parsePrivateKey finds the first private key in a PEM file (other blocks,
// such as a certificate in the same file, are skipped) and insists on an
// unencrypted RSA key in PKCS#1 or PKCS#8 form. name is the path as written,
// for messages.
func parsePrivateKey(data []byte, name string) (*rsa.PrivateKey, *problem) {
	var others []string
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if strings.Contains(block.Headers["Proc-Type"], "ENCRYPTED") || block.Type == "ENCRYPTED PRIVATE KEY" {
			return nil, &problem{
				msg: name + " holds an encrypted private key",
				fix: fmt.Sprintf("edihub cannot ask for a passphrase: decrypt it with `openssl pkey -in %s -out station-plain.key`, keep that file readable only by edihub (for example a Kubernetes Secret), and point private_key at it", name),
			}
		}
		switch block.Type {
		case "RSA PRIVATE KEY":
			k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
			if err != nil {
				return nil, &problem{msg: "the RSA PRIVATE KEY block in " + name + " is not a valid PKCS#1 key: " + err.Error(), fix: "export the key again as PEM (openssl pkey -in old.key -out " + name + ")", err: err}
			}
			return checkRSAKey(k, name)
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				// Some tools label PKCS#1 as "PRIVATE KEY".
				if k1, err1 := x509.ParsePKCS1PrivateKey(block.Bytes); err1 == nil {
					return checkRSAKey(k1, name)
				}
				return nil, &problem{msg: "the PRIVATE KEY block in " + name + " is not a valid PKCS#8 key", fix: "export the key again as PEM (openssl pkey -in old.key -out " + name + ")", err: err}
			}
			switch k := k.(type) {
			case *rsa.PrivateKey:
				return checkRSAKey(k, name)
			case *ecdsa.PrivateKey:
				return nil, notRSA(name, "an ECDSA")
			case ed25519.PrivateKey:
				return nil, notRSA(name, "an Ed25519")
			default:
				return nil, notRSA(name, fmt.Sprintf("a %T", k))
			}
		case "EC PRIVATE KEY":
			return nil, notRSA(name, "an ECDSA")
		case "OPENSSH PRIVATE KEY":
			return nil, &problem{msg: name + " is an OpenSSH key, not a PEM RSA private key", fix: "create an RSA key and certificate for AS2: openssl req -x509 -newkey rsa:2048 -nodes -keyout station.key -out station.crt -days 730 -subj \"/CN=<as2_id>\""}
		default:
			others = append(others, block.Type)
		}
	}
	if len(others) > 0 {
		return nil, &problem{
			msg: fmt.Sprintf("%s holds no private key (PEM blocks found: %s)", name, strings.Join(others, ", ")),
			fix: "point private_key at the file with the RSA PRIVATE KEY or PRIVATE KEY block",
		}
	}
	if _, err := x509.ParsePKCS8PrivateKey(data); err == nil {
		return nil, notPEMKey(name, "is DER-encoded")
	}
	if _, err := x509.ParsePKCS1PrivateKey(data); err == nil {
		return nil, notPEMKey(name, "is DER-encoded")
	}
	return nil, notPEMKey(name, "is not PEM")
}

func notPEMKey(name, what string) *problem {
	return &problem{
		msg: name + " " + what + "; edihub reads PEM private keys (-----BEGIN PRIVATE KEY-----)",
		fix: "convert it: openssl pkey -in " + name + " -out station.pem (add -inform DER for a DER file), and point private_key at the result",
	}
}

func notRSA(name, kind string) *problem {
	return &problem{
		msg: name + " holds " + kind + " key; " + needRSA,
		fix: "create an RSA key and certificate: openssl req -x509 -newkey rsa:2048 -nodes -keyout station.key -out station.crt -days 730 -subj \"/CN=<as2_id>\", and send partners the new certificate",
	}
}

func checkRSAKey(k *rsa.PrivateKey, name string) (*rsa.PrivateKey, *problem) {
	if bits := k.N.BitLen(); bits < 1024 {
		return nil, &problem{msg: fmt.Sprintf("the RSA key in %s has %d bits; Go refuses RSA keys under 1024 bits", name, bits), fix: "create a 2048-bit or larger RSA key and a certificate for it"}
	}
	return k, nil
}

// parseCertificates returns every CERTIFICATE block of a PEM file, in order;
// other blocks are skipped. All must be RSA certificates.
func parseCertificates(data []byte, name string) ([]*x509.Certificate, *problem) {
	var certs []*x509.Certificate
	var others []string
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			others = append(others, block.Type)
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, &problem{
				msg: fmt.Sprintf("certificate %d in %s does not parse: %v", len(certs)+1, name, err),
				fix: "export the certificate again as PEM (openssl x509 -in old.crt -out " + name + ")",
				err: err,
			}
		}
		if _, ok := c.PublicKey.(*rsa.PublicKey); !ok {
			return nil, &problem{
				msg: fmt.Sprintf("certificate %d in %s (%s) has an %s public key; %s", len(certs)+1, name, describeCert(c), c.PublicKeyAlgorithm, needRSA),
				fix: "use an RSA certificate (for a partner: ask them for their RSA AS2 certificate)",
			}
		}
		certs = append(certs, c)
	}
	if len(certs) > 0 {
		return certs, nil
	}
	if len(others) > 0 {
		return nil, &problem{
			msg: fmt.Sprintf("%s holds no certificate (PEM blocks found: %s)", name, strings.Join(others, ", ")),
			fix: "point certificate at the file with the -----BEGIN CERTIFICATE----- block",
		}
	}
	if _, err := x509.ParseCertificate(data); err == nil {
		return nil, &problem{
			msg: name + " is a DER certificate; edihub reads PEM",
			fix: "convert it: openssl x509 -inform DER -in " + name + " -out cert.pem, and point certificate at the result",
		}
	}
	return nil, &problem{
		msg: name + " is not a PEM certificate",
		fix: "point certificate at the PEM file that starts with -----BEGIN CERTIFICATE-----",
	}
}
