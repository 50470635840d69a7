package connector

// WithoutPosixRename makes s rename as on a server that does not offer
// posix-rename@openssh.com.
func (s *SFTP) WithoutPosixRename() { s.noPosixRename = true }
