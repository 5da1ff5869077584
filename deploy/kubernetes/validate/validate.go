// Package validate checks the manifests in deploy/kubernetes with
// Kubernetes' own code, in process: custom resources (agent-sandbox's
// SandboxTemplate, SandboxWarmPool, SandboxClaim, Sandbox) go through the
// apiextensions-apiserver's path for a create (pruning of unknown fields as
// fieldValidation=Strict reports them, defaulting, the OpenAPI schema, the
// metadata, list types and CEL rules); core kinds are decoded strictly into
// k8s.io/api's types and their metadata validated. It is a module of its own
// so that the product's module does not gain Kubernetes' dependencies.
package validate

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/endpoints/request"
	"sigs.k8s.io/yaml"
)

// kindSchema is what the API server holds for one served version of a CRD.
type kindSchema struct {
	structural *structuralschema.Structural
	validate   func(ctx context.Context, obj runtime.Object) field.ErrorList
	namespaced bool
}

// Validator validates manifests against a set of CRDs and the core types.
type Validator struct {
	kinds map[schema.GroupVersionKind]kindSchema
	core  runtime.Decoder
}

// New loads every *.yaml CRD in dir.
func New(dir string) (*Validator, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRDs (*.yaml) in %s", dir)
	}
	v := &Validator{kinds: map[schema.GroupVersionKind]kindSchema{}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(b, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if err := v.addCRD(&crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	v.core = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: true, Strict: true})
	return v, nil
}

func (v *Validator) addCRD(crd *apiextensionsv1.CustomResourceDefinition) error {
	for _, ver := range crd.Spec.Versions {
		if !ver.Served || ver.Schema == nil {
			continue
		}
		internal := &apiextensions.CustomResourceValidation{}
		if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(ver.Schema, internal, nil); err != nil {
			return err
		}
		s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
		if err != nil {
			return fmt.Errorf("version %s: not a structural schema: %w", ver.Name, err)
		}
		s = s.DeepCopy()
		if err := structuraldefaulting.PruneDefaults(s); err != nil {
			return err
		}
		sv, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
		if err != nil {
			return err
		}
		gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: ver.Name, Kind: crd.Spec.Names.Kind}
		namespaced := crd.Spec.Scope == apiextensionsv1.NamespaceScoped
		st := customresource.NewStrategy(nil, namespaced, gvk, sv, nil, s, nil, nil, ver.SelectableFields)
		v.kinds[gvk] = kindSchema{structural: s, validate: st.Validate, namespaced: namespaced}
	}
	return nil
}

// Documents splits a multi-document YAML stream.
func Documents(b []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out [][]byte
	for {
		d, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(d)) == 0 || isOnlyComments(d) {
			continue
		}
		out = append(out, d)
	}
}

func isOnlyComments(d []byte) bool {
	for _, l := range strings.Split(string(d), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") && l != "---" {
			return false
		}
	}
	return true
}

// Validate checks one YAML document, as an API server given it to create
// with fieldValidation=Strict in namespace ns (for objects that name none)
// would, and returns what it refuses.
func (v *Validator) Validate(doc []byte, ns string) error {
	var u unstructured.Unstructured
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	if err := u.UnmarshalJSON(j); err != nil {
		return err
	}
	gvk := u.GroupVersionKind()
	if k, ok := v.kinds[gvk]; ok {
		return v.validateCustom(&u, k, ns)
	}
	return v.validateCore(doc, gvk)
}

func (v *Validator) validateCustom(u *unstructured.Unstructured, k kindSchema, ns string) error {
	name := u.GetKind() + " " + u.GetName()
	unknown := structuralpruning.PruneWithOptions(u.Object, k.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	if len(unknown) > 0 {
		return fmt.Errorf("%s: unknown fields (refused with fieldValidation=Strict): %s", name, strings.Join(unknown, ", "))
	}
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u.Object, k.structural)
	structuraldefaulting.Default(u.Object, k.structural)
	if k.namespaced && u.GetNamespace() == "" {
		u.SetNamespace(ns)
	}
	ctx := request.WithNamespace(context.Background(), u.GetNamespace())
	if errs := k.validate(ctx, u); len(errs) > 0 {
		return fmt.Errorf("%s: %s", name, errs.ToAggregate().Error())
	}
	return nil
}

func (v *Validator) validateCore(doc []byte, gvk schema.GroupVersionKind) error {
	obj, _, err := v.core.Decode(doc, nil, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", gvk.Kind, err)
	}
	switch o := obj.(type) {
	case *corev1.Namespace:
		return aggregate(gvk.Kind, apivalidation.ValidateObjectMeta(&o.ObjectMeta, false, apivalidation.ValidateNamespaceName, nil))
	case *corev1.Secret:
		return aggregate(gvk.Kind, apivalidation.ValidateObjectMeta(&o.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, nil))
	case *networkingv1.NetworkPolicy:
		return aggregate(gvk.Kind, apivalidation.ValidateObjectMeta(&o.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, nil))
	}
	return fmt.Errorf("%s: no validation for this kind here", gvk)
}

func aggregate(kind string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w", kind, errs.ToAggregate())
}
