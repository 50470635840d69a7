package as2_test

import "crypto/x509"

type x509Cert = x509.Certificate
