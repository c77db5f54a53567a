// Package atomicfile replaces files so that a reader, or a crash, sees the old content or the new one, never
// part of either: a temp file in the same directory, fsync, rename, fsync of the directory (without the last
// step the rename itself may be lost in a crash).
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// TempInfix is in the name of every temp file: <name>.tmp<random>. A crash can leave one behind; whoever owns
// the directory may remove such files.
const TempInfix = ".tmp"

// Write replaces path with data, with permissions perm.
func Write(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+TempInfix+"*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir makes the creation, rename or removal of entries of dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
