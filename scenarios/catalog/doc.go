// Package catalog defines every scenario once, as data of the scenarios model: its setup, its steps and its
// expected outcomes, per kubelet version where they differ. Both backends run the same definitions.
package catalog
